/**
 * `GET /claim?token=…`: the page behind a claim link (POST /v1/agent/claim/link). A person enters
 * their email, receives a code and claims the agent account, as the claim API does. The single-use
 * claim token travels in every form and is itself the CSRF secret (another site cannot know it);
 * cross-origin posts are refused too.
 */
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option, Schema } from "effect"
import { isPlainEmailAddress } from "../contract/EmailAddress.js"
import { allRows } from "../platform/Rows.js"
import { Claim } from "./Claim.js"
import { escapeHtml, formFields, hidden, message, page, queryParam, sameOrigin, seeOther } from "./Html.js"

const TITLE = "Claim a Mailroom agent account"

/** Rows of "open claim session email". */
const OpenClaimSessionEmailRow = Schema.Struct({ email: Schema.String })

export const ClaimPageLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const claim = yield* Claim
    const sql = yield* SqlClient.SqlClient

    const openSession = (orgId: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sql`
          SELECT email FROM claim_sessions WHERE org_id = ${orgId} AND completed_at IS NULL AND voided_at IS NULL
            AND expires_at > ${new Date(now)} ORDER BY created_at DESC LIMIT 1`.pipe(
          allRows(OpenClaimSessionEmailRow, "open claim session email")
        )
        return Option.fromNullable(rows[0]?.email)
      }).pipe(Effect.orDie)

    const invalid = page(TITLE, message("error", "This claim link is invalid, expired or already used. Ask the agent for a new one."), 404)

    const render = (token: string, orgId: string, notice = "", status = 200) =>
      Effect.gen(function*() {
        const org = yield* claim.organization(orgId).pipe(Effect.option)
        const inbox = Option.match(org, { onNone: () => "", onSome: (o) => o.managed_inbox_address ?? "" })
        const sent = yield* openSession(orgId)
        const t = hidden("token", token)
        const codeForm = Option.match(sent, {
          onNone: () => "",
          onSome: (email) =>
            message("note", `A code was sent to ${email}.`) +
            `<form method="post" action="/claim/verify">${t}<label for="code">Code</label>` +
            `<input id="code" name="code" inputmode="numeric" autocomplete="one-time-code" required>` +
            `<button type="submit">Claim account</button></form>`
        })
        return page(
          TITLE,
          `<p>Claiming moves the agent account${inbox ? ` <b>${escapeHtml(inbox)}</b>` : ""} to the developer plan ` +
            `with your email as its owner. Its API key and inbox stay the same.</p>${notice}${codeForm}` +
            `<form method="post" action="/claim/send-code">${t}<label for="email">Email</label>` +
            `<input id="email" name="email" type="email" autocomplete="email" required><button type="submit">Send code</button></form>`,
          status
        )
      })

    const target = (token: string) => token === "" ? Effect.succeed(Option.none()) : claim.linkTarget(token)

    yield* router.get("/claim", Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (queryParam(request, "done") === "1") {
        return page(TITLE, message("note", "Claimed. The account is now on the developer plan and you are its owner."))
      }
      const token = queryParam(request, "token")
      const link = yield* target(token)
      if (Option.isNone(link)) return invalid
      return yield* render(token, link.value.org_id)
    }))

    const action = (
      run: (orgId: string, fields: Record<string, string>, token: string) => Effect.Effect<string, { readonly _tag: string; readonly message: string }>
    ) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const fields = yield* formFields
        if (!sameOrigin(request)) return page(TITLE, message("error", "This form came from another site."), 403)
        const token = fields["token"] ?? ""
        const link = yield* target(token)
        if (Option.isNone(link)) return invalid
        return yield* run(link.value.org_id, fields, token).pipe(
          Effect.map((location) => seeOther(location)),
          Effect.catchAll((e) => {
            const status = e._tag === "RateLimitExceeded" ? 429 : e._tag === "Conflict" ? 409 : e._tag === "ClaimExpired" ? 410 : 400
            return render(token, link.value.org_id, message("error", e.message), status)
          })
        )
      })

    yield* router.post("/claim/send-code", action((orgId, fields, token) =>
      Effect.gen(function*() {
        const email = (fields["email"] ?? "").trim()
        if (!isPlainEmailAddress(email)) {
          return yield* Effect.fail({ _tag: "ValidationError", message: "Enter a valid email address." })
        }
        yield* claim.start(orgId, email)
        return `/claim?token=${encodeURIComponent(token)}`
      })))

    yield* router.post("/claim/verify", action((orgId, fields) =>
      claim.verify(orgId, fields["code"] ?? "").pipe(Effect.as("/claim?done=1"))))
  }))
