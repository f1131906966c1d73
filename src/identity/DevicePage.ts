/**
 * `GET /device`: the CLI login verification page. It shows the user code, signs a
 * person in with their email and an emailed code, and lets them approve or deny the login.
 * Protection: a session cookie the page issued and signed (HttpOnly, SameSite=Lax, Secure when the
 * public base URL is https), replaced at sign-in and valid for the one login signed in for; a CSRF
 * token derived from it in every form; an Origin check; per-address and per-email limits on the
 * form actions; per-address and per-user-code limits on looking a code up (RFC 8628 §5.1), which
 * answer an HTML 429 page (the error envelope when the client asks for JSON only).
 */
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Option } from "effect"
import { isPlainEmailAddress } from "../contract/EmailAddress.js"
import { envelopeOf, type RateLimitExceeded } from "../contract/Errors.js"
import { AppConfig } from "../platform/Config.js"
import { RateLimiter } from "../platform/RateLimiter.js"
import { Accounts } from "./Accounts.js"
import { normalizeUserCode } from "./Codes.js"
import { DeviceLogin, type PendingLogin } from "./DeviceLogin.js"
import { COOKIE_NAME, DeviceWeb, WEB_SESSION_TTL_SECONDS, type WebSession } from "./DeviceWeb.js"
import { csrfToken, escapeHtml, formFields, hidden, message, page, queryParam, sameOrigin, seeOther } from "./Html.js"
import { clientAddress } from "./OptionalBody.js"

export const DEVICE_FORM_PER_ADDRESS = { limit: 30, windowSeconds: 600 } as const
export const DEVICE_CODE_PER_EMAIL = { limit: 5, windowSeconds: 900 } as const
/** A person looks their code up a handful of times per login (each form post lands on it again). */
export const DEVICE_LOOKUP_PER_ADDRESS = { limit: 30, windowSeconds: 600 } as const
export const DEVICE_LOOKUP_PER_CODE = { limit: 20, windowSeconds: 600 } as const

const TITLE = "Approve a Mailroom CLI login"

export const DevicePageLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const device = yield* DeviceLogin
    const web = yield* DeviceWeb
    const accounts = yield* Accounts
    const limiter = yield* RateLimiter
    const secure = config.publicBaseUrl.startsWith("https:")

    const withCookie = (res: HttpServerResponse.HttpServerResponse, token: string | null) =>
      token === null ? res : HttpServerResponse.unsafeSetCookie(res, COOKIE_NAME, token, {
        httpOnly: true,
        sameSite: "lax",
        path: "/device",
        secure,
        maxAge: `${WEB_SESSION_TTL_SECONDS} seconds`
      })

    const anonymous = (): WebSession => ({ id: "", userId: null, pendingEmail: null, codeExpiresAt: null, loginId: null })

    /**
     * The browser's cookie and its session, if it has one yet. A cookie the page did not issue
     * (missing, planted, forged) is replaced by a new one: session ids come from the server only.
     */
    const session = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const cookie = request.cookies[COOKIE_NAME]
      if (cookie !== undefined && web.issuedCookie(cookie)) {
        const found = yield* web.find(cookie)
        return { session: Option.getOrElse(found, anonymous), token: cookie, fresh: false }
      }
      return { session: anonymous(), token: web.newCookie(), fresh: true }
    })

    /** Signed in, and for this very login: a sign-in made for another user code does not count. */
    const signedInFor = (s: WebSession, login: PendingLogin) => s.userId !== null && s.loginId === login.id

    const enterCodeForm = (notice: string) =>
      `${notice}<form method="get" action="/device"><label for="user_code">User code</label>` +
      `<input id="user_code" name="user_code" autocomplete="off" placeholder="BCDF-GHJK" required>` +
      `<button type="submit">Continue</button></form>`

    const render = (s: WebSession, token: string, login: PendingLogin, notice = "", status = 200) =>
      Effect.gen(function*() {
        const csrf = hidden("csrf", csrfToken(token)) + hidden("user_code", login.userCode)
        const head = `<p>Confirm this code matches the one shown by ${escapeHtml(login.deviceName ?? "your CLI")}:</p>` +
          `<p class="code" id="user-code">${escapeHtml(login.userCode)}</p>${notice}`
        if (s.userId !== null && signedInFor(s, login)) {
          const user = yield* accounts.findUserById(s.userId)
          const orgs = yield* accounts.workspaces(s.userId)
          const select = orgs.length > 1
            ? `<label for="org_id">Workspace</label><select id="org_id" name="org_id">${
              orgs.map((o) => `<option value="${o.id}">${escapeHtml(o.name ?? o.id)} (${o.role})</option>`).join("")
            }</select>`
            : orgs.length === 1 ? hidden("org_id", orgs[0]!.id) : ""
          const who = Option.match(user, { onNone: () => "", onSome: (u) => escapeHtml(u.email) })
          const body = orgs.length === 0
            ? message("error", "This account has no workspace to sign the CLI in to.")
            : `<p>Signed in as <b>${who}</b>. Approve only if you started this login.</p>` +
              `<form method="post" action="/device/decision">${csrf}${select}` +
              `<button type="submit" name="decision" value="approve">Approve</button>` +
              `<button type="submit" name="decision" value="deny">Deny</button></form>`
          return page(TITLE, head + body, status)
        }
        const emailForm = `<form method="post" action="/device/send-code">${csrf}` +
          `<label for="email">Email</label><input id="email" name="email" type="email" autocomplete="email" required ` +
          `value="${escapeHtml(s.pendingEmail ?? "")}"><button type="submit">Send code</button></form>`
        const codeSent = s.pendingEmail !== null && s.codeExpiresAt !== null && s.loginId === login.id
        const codeForm = codeSent
          ? message("note", `If ${s.pendingEmail} has a Mailroom account, a sign-in code is on its way.`) +
            `<form method="post" action="/device/sign-in">${csrf}` +
            `<label for="code">Code</label><input id="code" name="code" inputmode="numeric" autocomplete="one-time-code" required>` +
            `<button type="submit">Sign in</button></form>`
          : ""
        return page(TITLE, `${head}<p>Sign in to approve it.</p>${codeForm}${emailForm}`, status)
      })

    const loginFor = (userCode: string) => device.pending(userCode)

    const notFoundPage = (token: string | null) =>
      withCookie(
        page(TITLE, enterCodeForm(message("error", "This code is invalid, expired or already used. Start a new login in the CLI.")), 404),
        token
      )

    /** An HTML page for browsers; the error envelope for a client that asks for JSON only. */
    const tooMany = (e: RateLimitExceeded) =>
      Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
        const accept = request.headers["accept"] ?? ""
        return accept.includes("application/json") && !accept.includes("text/html")
          ? HttpServerResponse.unsafeJson(envelopeOf(e), { status: 429, headers: { "cache-control": "no-store" } })
          : page("Too many attempts", message("error", e.message), 429)
      })

    /**
     * Counts a user-code lookup per client address and per code (keyed hash: the limiter's table
     * does not hold codes). Only well-formed codes reach the per-code window.
     */
    const limitLookup = (request: HttpServerRequest.HttpServerRequest, raw: string) =>
      Effect.gen(function*() {
        yield* limiter.enforce(`device-lookup:ip:${clientAddress(request)}`, DEVICE_LOOKUP_PER_ADDRESS, "user code lookups from this address")
        const code = normalizeUserCode(raw)
        if (code !== "") {
          yield* limiter.enforce(`device-lookup:code:${web.userCodeKey(code)}`, DEVICE_LOOKUP_PER_CODE, "lookups of this user code")
        }
      })

    const formGuard = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const fields = yield* formFields
      const s = yield* session
      if (s.fresh || !sameOrigin(request) || fields["csrf"] !== csrfToken(s.token)) {
        return Option.none()
      }
      yield* limiter.enforce(`device-form:ip:${clientAddress(request)}`, DEVICE_FORM_PER_ADDRESS, "device page actions")
      const live = s.session.id === "" ? yield* web.ensure(s.token) : s.session
      return Option.some({ fields, session: live, token: s.token })
    })

    const forbidden = page(TITLE, message("error", "This form expired or came from another site. Reload the page and try again."), 403)

    const post = (
      handler: (ctx: { fields: Record<string, string>; session: WebSession; token: string; login: PendingLogin }) => Effect.Effect<HttpServerResponse.HttpServerResponse, RateLimitExceeded>
    ) =>
      Effect.gen(function*() {
        const guarded = yield* formGuard
        if (Option.isNone(guarded)) return forbidden
        const login = yield* loginFor(guarded.value.fields["user_code"] ?? "")
        if (Option.isNone(login)) return notFoundPage(null)
        return yield* handler({ ...guarded.value, login: login.value })
      }).pipe(Effect.catchTag("RateLimitExceeded", tooMany))

    yield* router.get("/device", Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const s = yield* session
      const cookie = s.fresh ? s.token : null
      const done = queryParam(request, "done")
      if (done === "approved") {
        return withCookie(page(TITLE, message("note", "Approved. Your CLI is now signed in; you can close this page.")), cookie)
      }
      if (done === "denied") {
        return withCookie(page(TITLE, message("note", "Denied. The CLI login was refused; you can close this page.")), cookie)
      }
      const raw = queryParam(request, "user_code")
      if (raw === "") return withCookie(page(TITLE, enterCodeForm("")), cookie)
      yield* limitLookup(request, raw)
      const login = yield* loginFor(raw)
      if (Option.isNone(login)) return notFoundPage(cookie)
      return withCookie(yield* render(s.session, s.token, login.value), cookie)
    }).pipe(Effect.catchTag("RateLimitExceeded", tooMany)))

    yield* router.post("/device/send-code", post(({ fields, session: s, login }) =>
      Effect.gen(function*() {
        const email = (fields["email"] ?? "").trim().toLowerCase()
        if (!isPlainEmailAddress(email)) {
          return yield* render(s, "", login, message("error", "Enter one valid email address, such as name@example.com."), 400)
        }
        yield* limiter.enforce(`device-code:email:${email}`, DEVICE_CODE_PER_EMAIL, "sign-in codes for this email")
        yield* web.sendCode(s.id, email, login.id, "`mailroom signup` or POST /v1/cli/signup/start")
        return seeOther(`/device?user_code=${login.userCode}`)
      })))

    yield* router.post("/device/sign-in", post(({ fields, session: s, token, login }) =>
      Effect.gen(function*() {
        const result = yield* web.verifyCode(s.id, fields["code"] ?? "", login.id)
        // A new cookie at sign-in: whoever knew the old one (a planted cookie) is not signed in.
        if (result._tag === "Ok") return withCookie(seeOther(`/device?user_code=${login.userCode}`), result.cookie)
        const fresh = Option.getOrElse(yield* web.find(token), () => s)
        const text = result._tag === "Wrong"
          ? "That code is not right. Check the email and try again."
          : result._tag === "Expired"
          ? "The code expired. Send a new one."
          : "Send a sign-in code for this login first."
        return yield* render(fresh, token, login, message("error", text), 400)
      })))

    yield* router.post("/device/decision", post(({ fields, session: s, token, login }) =>
      Effect.gen(function*() {
        if (s.userId === null || !signedInFor(s, login)) {
          return yield* render(s, token, login, message("error", "Sign in to approve this login."), 403)
        }
        if (fields["decision"] === "deny") {
          yield* device.deny(login.id)
          return seeOther("/device?done=denied")
        }
        if (fields["decision"] !== "approve") return yield* render(s, token, login, message("error", "Choose Approve or Deny."), 400)
        const orgs = yield* accounts.workspaces(s.userId)
        const orgId = fields["org_id"] ?? orgs[0]?.id ?? ""
        const ok = orgs.some((o) => o.id === orgId) && (yield* device.approve(login.id, s.userId, orgId))
        if (!ok) return yield* render(s, token, login, message("error", "Choose one of your workspaces."), 400)
        return seeOther("/device?done=approved")
      })))
  }))
