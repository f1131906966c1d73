/** Credentials: login (device flow), signup, agent create, claim, logout, whoami. */
import { Command, Options } from "@effect/cli"
import { Clock, Console, Duration, Effect, Either, Option } from "effect"
import { hostname } from "node:os"
import { CliFailure } from "../Failure.js"
import { done, showOne } from "../Output.js"
import { forgetCredentials, saveProfile } from "../Profile.js"
import { anonymousClient, authedClient, type Client, profileFromTokenSet, target } from "../Session.js"
import { ask, note, openBrowser, withSpinner } from "../Terminal.js"

const deviceName = Options.text("device-name").pipe(
  Options.optional,
  Options.withDescription("name of this session shown in the dashboard (default: the host name)")
)
const nameOf = (o: Option.Option<string>) => Option.getOrElse(o, () => hostname().slice(0, 80) || "mailroom-cli")

const acceptTerms = Options.boolean("accept-terms").pipe(Options.withDescription("accept the terms of service"))

const requireTerms = (accepted: boolean) =>
  Effect.gen(function*() {
    if (accepted) return true as const
    if (process.stdin.isTTY !== true) {
      return yield* new CliFailure({ message: "pass --accept-terms to accept the terms of service", usage: true })
    }
    const answer = yield* ask("Accept the Mailroom terms of service? [y/N] ")
    if (!/^y(es)?$/i.test(answer)) return yield* new CliFailure({ message: "the terms were not accepted" })
    return true as const
  })

const codeOption = Options.text("code").pipe(
  Options.optional,
  Options.withDescription("the 6-digit code from the email (asked for on stdin when omitted)")
)
const codeFrom = (code: Option.Option<string>, email: string) =>
  Option.match(code, { onSome: Effect.succeed, onNone: () => ask(`Code sent to ${email}: `) })

const intervalOf = (details: { readonly [k: string]: unknown } | undefined, fallback: number) =>
  typeof details?.interval === "number" && details.interval > 0 ? details.interval : fallback

/** RFC 8628 polling: wait `interval`, back off on `slow_down`, stop on anything but pending. */
const pollForTokens = (api: Client, deviceCode: string, interval: number) =>
  Effect.gen(function*() {
    let wait = interval
    for (;;) {
      yield* Effect.sleep(Duration.seconds(wait))
      const outcome = yield* api.auth.loginPoll({ payload: { device_code: deviceCode }, headers: {} }).pipe(
        Effect.map(Either.right),
        Effect.catchTags({
          AuthorizationPending: (e) => Effect.succeed(Either.left(intervalOf(e.details, wait))),
          SlowDown: (e) => Effect.succeed(Either.left(intervalOf(e.details, wait + 5)))
        })
      )
      if (Either.isRight(outcome)) return outcome.right
      wait = outcome.left
    }
  })

const login = Command.make("login", {
  noBrowser: Options.boolean("no-browser").pipe(Options.withDescription("only print the URL; do not open a browser")),
  deviceName
}, ({ deviceName, noBrowser }) =>
  Effect.gen(function*() {
    const t = yield* target
    const api = yield* anonymousClient(t)
    const start = yield* api.auth.loginStart({ payload: { device_name: nameOf(deviceName) }, headers: {} })
    yield* note(
      `To log in, open this URL in a browser and approve the code ${start.user_code}:\n\n` +
        `  ${start.verification_uri_complete}\n`
    )
    if (!noBrowser) yield* openBrowser(start.verification_uri_complete)
    const tokens = yield* withSpinner(
      "waiting for approval in the browser…",
      pollForTokens(api, start.device_code, start.interval).pipe(
        Effect.timeoutFail({
          duration: Duration.seconds(start.expires_in + 5),
          onTimeout: () => new CliFailure({ message: "the login was not approved in time; run `mailroom login` again" })
        })
      )
    )
    const now = yield* Clock.currentTimeMillis
    yield* saveProfile(t.profileName, profileFromTokenSet(t.apiBase, tokens, now))
    yield* done(t.json, `Logged in to organization ${tokens.org_id} (profile "${t.profileName}").`, {
      profile: t.profileName,
      org_id: tokens.org_id,
      org_name: tokens.org_name,
      oauth_grant_id: tokens.oauth_grant_id,
      expires_in: tokens.expires_in
    })
  })).pipe(Command.withDescription("Log in through the browser (device authorization); stores the tokens in the profile"))

const signup = Command.make("signup", {
  email: Options.text("email").pipe(Options.withDescription("your email address")),
  acceptTerms,
  signupCode: Options.text("signup-code").pipe(Options.optional, Options.withDescription("reserved sign-up code")),
  code: codeOption,
  deviceName
}, (o) =>
  Effect.gen(function*() {
    const t = yield* target
    const api = yield* anonymousClient(t)
    yield* requireTerms(o.acceptTerms)
    const pending = yield* api.auth.cliSignupStart({
      payload: {
        email: o.email,
        terms_accepted: true,
        device_name: nameOf(o.deviceName),
        ...Option.match(o.signupCode, { onNone: () => ({}), onSome: (signup_code) => ({ signup_code }) })
      },
      headers: {}
    })
    yield* note(`A ${pending.verification_code_length}-digit code was sent to ${pending.email}.`)
    const code = yield* codeFrom(o.code, pending.email)
    const tokens = yield* api.auth.cliSignupVerify({
      payload: { signup_token: pending.signup_token, verification_code: code },
      headers: {}
    })
    const now = yield* Clock.currentTimeMillis
    yield* saveProfile(t.profileName, profileFromTokenSet(t.apiBase, tokens, now))
    yield* done(t.json, `Signed up and logged in to organization ${tokens.org_id} (profile "${t.profileName}").`, {
      profile: t.profileName,
      org_id: tokens.org_id,
      oauth_grant_id: tokens.oauth_grant_id
    })
  })).pipe(Command.withDescription("Create an account with your email (a code is mailed to it) and log in"))

const agentCreate = Command.make("create", {
  acceptTerms,
  deviceName,
  force: Options.boolean("force").pipe(Options.withDescription("replace credentials already stored in the profile"))
}, (o) =>
  Effect.gen(function*() {
    const t = yield* target
    if (!o.force && (t.profile.api_key !== undefined || t.profile.access_token !== undefined)) {
      return yield* new CliFailure({
        message: `profile "${t.profileName}" already holds credentials; use --profile NAME or --force`,
        usage: true
      })
    }
    yield* requireTerms(o.acceptTerms)
    const api = yield* anonymousClient(t)
    const account = yield* api.agentAccounts.create({
      payload: { terms_accepted: true, device_name: nameOf(o.deviceName) },
      headers: {}
    })
    yield* saveProfile(t.profileName, {
      base_url: t.apiBase,
      auth_method: "api_key",
      api_key: account.api_key,
      org_id: account.org_id
    })
    if (t.json) return yield* showOne(true, account)
    yield* Console.log([
      `Agent account ${account.org_id} created (plan ${account.plan}); API key stored in profile "${t.profileName}".`,
      `API key (shown once): ${account.api_key}`,
      `Inbox: ${account.address ?? "(not published yet)"}`,
      `Upgrade: ${account.upgrade.description} (mailroom claim --email you@example.com)`
    ].join("\n"))
  })).pipe(Command.withDescription("Create an emailless agent account and store its API key"))

const agent = Command.make("agent").pipe(
  Command.withDescription("Agent accounts"),
  Command.withSubcommands([agentCreate])
)

const claim = Command.make("claim", {
  email: Options.text("email").pipe(Options.optional, Options.withDescription("the person's email to claim with")),
  link: Options.boolean("link").pipe(Options.withDescription("print a single-use claim link for a person instead")),
  code: codeOption
}, (o) =>
  Effect.gen(function*() {
    const { client, target: t } = yield* authedClient
    if (o.link) {
      const link = yield* client.authSession.claimLink({ payload: {}, headers: {} })
      return yield* done(t.json, `Open within ${Math.round(link.expires_in_seconds / 60)} minutes: ${link.claim_url ?? link.claim_token}`, link)
    }
    if (Option.isNone(o.email)) {
      return yield* new CliFailure({ message: "pass --email ADDRESS (or --link)", usage: true })
    }
    const email = o.email.value
    yield* client.authSession.claimStart({ payload: { email }, headers: {} })
    yield* note(`A code was sent to ${email}.`)
    const code = yield* codeFrom(o.code, email)
    const result = yield* client.authSession.claimVerify({ payload: { verification_code: code }, headers: {} })
    yield* done(t.json, `Claimed: organization ${result.org_id} now belongs to ${result.email} (plan ${result.plan}).`, result)
  })).pipe(Command.withDescription("Claim this agent account for a person (moves it to the developer plan)"))

const logout = Command.make("logout", {}, () =>
  Effect.gen(function*() {
    const t = yield* target
    const stored = t.profile.access_token !== undefined || t.profile.api_key !== undefined
    if (!stored) return yield* done(t.json, `Profile "${t.profileName}" holds no credentials.`, { revoked: false })
    const result = yield* authedClient.pipe(
      Effect.flatMap(({ client }) => client.authSession.logout({ payload: {}, headers: {} })),
      // Already revoked or expired: there is nothing left to revoke, only the local copy to forget.
      Effect.catchTag("Unauthorized", () => Effect.succeed({ revoked: false }))
    )
    yield* forgetCredentials(t.profileName)
    yield* done(
      t.json,
      `${result.revoked ? "Revoked the session and removed" : "Removed"} the credentials of profile "${t.profileName}".`,
      result
    )
  })).pipe(Command.withDescription("Revoke this login and remove the stored credentials"))

const whoami = Command.make("whoami", {}, () =>
  Effect.gen(function*() {
    const { client, credential, target: t } = yield* authedClient
    const account = yield* client.account.get()
    yield* showOne(t.json, {
      profile: t.profileName,
      api_base: t.apiBase,
      credential: credential.kind === "env" ? "MAILROOM_API_KEY" : credential.kind,
      org_id: account.id,
      email: account.email,
      plan: account.plan,
      managed_inbox_address: account.managed_inbox_address
    })
  })).pipe(Command.withDescription("Show the organization and credential in use"))

export const authCommands = [login, signup, agent, claim, logout, whoami] as const
