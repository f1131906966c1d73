/**
 * Where the CLI talks to and as whom: the API base (flag, MAILROOM_BASE_URL, profile, default),
 * the credential (MAILROOM_API_KEY, else the profile's API key or OAuth token set) and the typed
 * client derived from the contract. An OAuth access token is refreshed before it expires and once
 * more on a 401; the new token set is written back to the profile.
 */
import { HttpApiClient, HttpClient, HttpClientRequest, type HttpClientResponse } from "@effect/platform"
import { Clock, Effect, Option, Ref } from "effect"
import { MailroomApi } from "../Api.js"
import { InvalidGrant } from "../contract/Errors.js"
import type { TokenSet } from "../identity/Api.js"
import { CliFailure } from "./Failure.js"
import { loadProfile, saveProfile, type StoredProfile } from "./Profile.js"
import { Globals } from "./Globals.js"
import { LastResponse } from "./LastResponse.js"
import { DEFAULT_API_BASE } from "./Root.js"

/** Refresh this long before the access token's expiry. */
const REFRESH_MARGIN_MS = 60_000

export interface Target {
  readonly profileName: string
  readonly profile: StoredProfile
  /** The API base as users write it, ending in /v1. */
  readonly apiBase: string
  /** What the client needs: the contract's paths already start with /v1. */
  readonly origin: string
  readonly json: boolean
}

export const normalizeApiBase = (raw: string) =>
  Effect.gen(function*() {
    const trimmed = raw.trim().replace(/\/+$/, "")
    let url: URL
    try {
      url = new URL(trimmed)
    } catch {
      return yield* new CliFailure({ message: `not a URL: ${raw} (expected e.g. ${DEFAULT_API_BASE})`, usage: true })
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      return yield* new CliFailure({ message: `the API base must be http(s): ${raw}`, usage: true })
    }
    const apiBase = trimmed.endsWith("/v1") ? trimmed : `${trimmed}/v1`
    return { apiBase, origin: apiBase.slice(0, -"/v1".length) }
  })

export const target = Effect.gen(function*() {
  const g = yield* Globals
  const profile = yield* loadProfile(g.profile)
  const raw = Option.getOrElse(g.baseUrl, () => profile.base_url ?? DEFAULT_API_BASE)
  const { apiBase, origin } = yield* normalizeApiBase(raw)
  return { profileName: g.profile, profile, apiBase, origin, json: g.json } satisfies Target
})

export const profileFromTokenSet = (apiBase: string, t: TokenSet, nowMs: number): StoredProfile => ({
  base_url: apiBase,
  auth_method: "oauth",
  access_token: t.access_token,
  refresh_token: t.refresh_token,
  expires_at: new Date(nowMs + t.expires_in * 1000).toISOString(),
  oauth_grant_id: t.oauth_grant_id,
  org_id: t.org_id,
  org_name: t.org_name
})

const recordResponse = (last: Ref.Ref<Readonly<Record<string, string>>>) => (client: HttpClient.HttpClient) =>
  HttpClient.tap(client, (res: HttpClientResponse.HttpClientResponse) => Ref.set(last, res.headers))

/** A client without a credential (sign-up, login, agent accounts, refresh). */
export const anonymousClient = (t: Target) =>
  Effect.flatMap(LastResponse, (last) => HttpApiClient.make(MailroomApi, { baseUrl: t.origin, transformClient: recordResponse(last) }))

export type Client = Effect.Effect.Success<ReturnType<typeof anonymousClient>>

type Credential =
  | { readonly kind: "env" | "api_key"; readonly token: string }
  | { readonly kind: "oauth"; token: string; refreshToken: string; expiresAt: number }

const credentialOf = (p: StoredProfile): Option.Option<Credential> => {
  const env = process.env.MAILROOM_API_KEY
  if (env !== undefined && env !== "") return Option.some({ kind: "env", token: env })
  if (p.auth_method === "api_key" && p.api_key !== undefined) return Option.some({ kind: "api_key", token: p.api_key })
  if (p.auth_method === "oauth" && p.access_token !== undefined && p.refresh_token !== undefined) {
    const expiresAt = p.expires_at !== undefined ? new Date(p.expires_at).getTime() : 0
    return Option.some({ kind: "oauth", token: p.access_token, refreshToken: p.refresh_token, expiresAt })
  }
  return Option.none()
}

export const notLoggedIn = (t: Target) =>
  new CliFailure({
    message: `not logged in (profile "${t.profileName}"): run \`mailroom login\`, \`mailroom signup\` or ` +
      "`mailroom agent create`, or set MAILROOM_API_KEY"
  })

/** The typed client with the profile's credential; fails when there is none. */
export const authedClient = Effect.gen(function*() {
  const t = yield* target
  const cred = yield* Option.match(credentialOf(t.profile), {
    onNone: () => Effect.fail(notLoggedIn(t)),
    onSome: Effect.succeed
  })
  const anonymous = yield* anonymousClient(t)
  const last = yield* LastResponse

  const refresh = (c: Extract<Credential, { kind: "oauth" }>) =>
    Effect.gen(function*() {
      const set = yield* anonymous.auth.tokenRefresh({ payload: { refresh_token: c.refreshToken }, headers: {} }).pipe(
        Effect.catchTag("InvalidGrant", (e) =>
          Effect.fail(
            new InvalidGrant({
              message: `${e.message} (the stored login is no longer valid)`,
              details: { ...e.details, remediation: "run `mailroom login` again" }
            })
          ))
      )
      const now = yield* Clock.currentTimeMillis
      const stored = { ...profileFromTokenSet(t.profile.base_url ?? t.apiBase, set, now) }
      yield* saveProfile(t.profileName, stored)
      c.token = set.access_token
      c.refreshToken = set.refresh_token
      c.expiresAt = now + set.expires_in * 1000
    })

  if (cred.kind === "oauth" && cred.expiresAt - REFRESH_MARGIN_MS <= (yield* Clock.currentTimeMillis)) {
    yield* refresh(cred)
  }
  // A 401 with an OAuth token (revoked elsewhere, clock skew) gets one refresh and one retry.
  let retried = false
  const transformClient = (client: HttpClient.HttpClient) => {
    const authed = HttpClient.mapRequest(client, (req) => HttpClientRequest.bearerToken(req, cred.token))
    return recordResponse(last)(HttpClient.transform(authed, (effect, request) =>
      Effect.flatMap(effect, (res) => {
        if (res.status !== 401 || cred.kind !== "oauth" || retried) return Effect.succeed(res)
        retried = true
        return refresh(cred).pipe(
          Effect.matchEffect({
            onFailure: () => Effect.succeed(res),
            onSuccess: () => authed.execute(request)
          })
        )
      })))
  }
  const client = yield* HttpApiClient.make(MailroomApi, { baseUrl: t.origin, transformClient })
  return { client, target: t, credential: cred }
})
