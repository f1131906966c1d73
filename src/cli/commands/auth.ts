/** Credentials: login (device flow), signup, agent create, claim, logout, whoami. */
import { Clock, Console, Duration, Effect, Either, Option } from "effect"
import { hostname } from "node:os"
import { CliFailure } from "../Failure.js"
import { done, showOne } from "../Output.js"
import { forgetCredentials, saveProfile } from "../Profile.js"
import { anonymousClient, authedClient, type Client, profileFromTokenSet, target } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { ask, note, openBrowser, withSpinner } from "../Terminal.js"

/**
 * Where the mailed code is. The CLI cannot tell whether the service relays mail, so it says where a
 * service without a relay puts it: its dev outbox, whose file path the service also logs.
 */
const codeSent = (email: string, length?: number) =>
  note(
    `A ${length !== undefined ? `${length}-digit ` : ""}code was sent to ${email}.\n` +
      "No mail? A service without an outbound relay (OUTBOUND_SMTP_URL) writes it to its dev outbox, " +
      "DATA_DIR/outbox/*.eml, and logs the file's path (\"dev outbox: mail to …\")."
  )

const profileFlag = (name: string) => (name === "default" ? "" : ` --profile ${name}`)

const nameOf = (o: Option.Option<string>) => Option.getOrElse(o, () => hostname().slice(0, 80) || "mailroom-cli")

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

/**
 * The mailed code when the caller is there to type it: asked on stdin. With nothing to read (stdin
 * closed, as for an agent or a script), `None`: the flow stops after mailing the code and says which
 * command finishes it with `--code`.
 */
const codeOnStdin = (email: string) =>
  ask(`Code sent to ${email}: `).pipe(
    Effect.map((answer) => (answer === "" ? Option.none<string>() : Option.some(answer))),
    Effect.catchTag("CliFailure", () => Effect.succeed(Option.none<string>()))
  )

/** The flow stopped after mailing its code: what finishes it. */
const finishWith = (json: boolean, email: string, command: string) =>
  done(json, `No code given. Once it arrives, finish with:\n  ${command}`, {
    status: "code_sent",
    email,
    next: command
  })

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

export const login: Handler<typeof S.login> = ({ deviceName, noBrowser }) =>
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
  })

export const signup: Handler<typeof S.signup> = (o) =>
  Effect.gen(function*() {
    const t = yield* target
    const api = yield* anonymousClient(t)
    const stored = t.profile.pending_signup
    const pendingHere = stored !== undefined && stored.email.toLowerCase() === o.email.toLowerCase() &&
      Date.parse(stored.expires_at) > Date.now()
    let signupToken: string
    let code: Option.Option<string>
    if (Option.isSome(o.code) && pendingHere) {
      // The second half of a scripted sign-up: verify the code of the one already started.
      signupToken = stored.signup_token
      code = o.code
    } else {
      if (Option.isSome(o.code)) {
        return yield* new CliFailure({
          message: `no sign-up of ${o.email} is waiting for a code in profile "${t.profileName}": ` +
            `run \`mailroom signup --email ${o.email} --accept-terms\` first (it mails the code), then add --code`,
          usage: true
        })
      }
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
      yield* codeSent(pending.email, pending.verification_code_length)
      signupToken = pending.signup_token
      code = yield* codeOnStdin(pending.email)
      if (Option.isNone(code)) {
        // Kept in the profile (0600) so that `--code` alone finishes it, from another process.
        yield* saveProfile(t.profileName, {
          ...t.profile,
          pending_signup: {
            email: o.email,
            signup_token: pending.signup_token,
            expires_at: new Date(Date.now() + pending.expires_in * 1000).toISOString()
          }
        })
        return yield* finishWith(t.json, pending.email, `mailroom signup --email ${o.email} --code CODE${profileFlag(t.profileName)}`)
      }
    }
    const tokens = yield* api.auth.cliSignupVerify({
      payload: { signup_token: signupToken, verification_code: code.value },
      headers: {}
    })
    const now = yield* Clock.currentTimeMillis
    yield* saveProfile(t.profileName, profileFromTokenSet(t.apiBase, tokens, now))
    yield* done(t.json, `Signed up and logged in to organization ${tokens.org_id} (profile "${t.profileName}").`, {
      profile: t.profileName,
      org_id: tokens.org_id,
      oauth_grant_id: tokens.oauth_grant_id
    })
  })

export const agentCreate: Handler<typeof S.agentCreate> = (o) =>
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
  })


export const claim: Handler<typeof S.claim> = (o) =>
  Effect.gen(function*() {
    const { client, target: t } = yield* authedClient
    if (o.link) {
      const link = yield* client.authSession.claimLink({ payload: {}, headers: {} })
      return yield* done(t.json, `Open within ${Math.round(link.expires_in_seconds / 60)} minutes: ${link.claim_url ?? link.claim_token}`, link)
    }
    let code = o.code
    if (Option.isNone(code)) {
      // No code yet: start the claim (a code is mailed), then take the code on stdin or from a second run.
      if (Option.isNone(o.email)) {
        return yield* new CliFailure({ message: "pass --email ADDRESS (or --link)", usage: true })
      }
      const email = o.email.value
      yield* client.authSession.claimStart({ payload: { email }, headers: {} })
      yield* codeSent(email)
      code = yield* codeOnStdin(email)
      if (Option.isNone(code)) {
        return yield* finishWith(t.json, email, `mailroom claim --email ${email} --code CODE${profileFlag(t.profileName)}`)
      }
    }
    // With --code: the code of the claim already started is verified; no new code is asked for.
    const result = yield* client.authSession.claimVerify({ payload: { verification_code: code.value }, headers: {} }).pipe(
      Effect.catchTag("NotFound", () =>
        new CliFailure({
          message: "no claim is waiting for a code: run `mailroom claim --email ADDRESS` first (it mails the code), then add --code"
        }))
    )
    yield* done(t.json, `Claimed: organization ${result.org_id} now belongs to ${result.email} (plan ${result.plan}).`, result)
  })

export const logout: Handler<typeof S.logout> = () =>
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
  })

export const whoami: Handler<typeof S.whoami> = () =>
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
  })
