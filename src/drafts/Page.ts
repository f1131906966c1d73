/**
 * The page the owner's approval mail links to: the held send and two labelled buttons, Approve and
 * Reject. The link's single-use token is the credential (it reached the owner's mailbox); GET
 * writes nothing (mail scanners open links), the form's POST spends the token with the decision.
 */
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect, Option } from "effect"
import { escapeHtml, formFields, hidden, message, page, queryParam, sameOrigin, seeOther } from "../identity/Html.js"
import { Approvals, REVIEW_PATH } from "./Approvals.js"
import type { Draft } from "./Api.js"

const TITLE = "Approve a send"

const gone = () =>
  page(TITLE, message("error", "This link was already used, has expired, or is not valid. `mailroom drafts list` shows the drafts."), 404)

const summary = (d: Draft, text: string | null) =>
  `<dl><dt>From</dt><dd id="draft-from">${escapeHtml(d.from)}</dd>` +
  `<dt>To</dt><dd id="draft-to">${escapeHtml([...d.to, ...d.cc, ...d.bcc].join(", "))}</dd>` +
  `<dt>Subject</dt><dd id="draft-subject">${escapeHtml(d.subject)}</dd></dl>` +
  (d.new_recipients.length > 0 ? message("note", `Never written to before: ${d.new_recipients.join(", ")}`) : "") +
  (text === null ? "" : `<pre id="draft-text" style="white-space:pre-wrap">${escapeHtml(text.slice(0, 20_000))}</pre>`)

export const DraftReviewPageLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const approvals = yield* Approvals

    yield* router.get(REVIEW_PATH, Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const done = queryParam(request, "done")
      if (done === "approved") return page(TITLE, message("note", "Approved: the email was sent. You can close this page."))
      if (done === "failed") return page(TITLE, message("error", "Approved, but the send was refused; `mailroom drafts list` shows why."))
      if (done === "rejected") return page(TITLE, message("note", "Rejected: the email will not be sent. You can close this page."))
      const token = queryParam(request, "token")
      const found = token === "" ? Option.none() : yield* approvals.byToken(token)
      if (Option.isNone(found)) return gone()
      const { draft, text } = found.value
      if (draft.status !== "pending_approval") return gone()
      return page(
        TITLE,
        summary(draft, text) +
          `<form method="post" action="${REVIEW_PATH}">${hidden("token", token)}` +
          `<button type="submit" name="decision" value="approve" aria-label="Approve">Approve</button>` +
          `<button type="submit" name="decision" value="reject" aria-label="Reject">Reject</button></form>`
      )
    }))

    yield* router.post(REVIEW_PATH, Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (!sameOrigin(request)) return page(TITLE, message("error", "This form must be sent from its own page."), 403)
      const fields = yield* formFields
      const decision = fields["decision"]
      if (decision !== "approve" && decision !== "reject") return page(TITLE, message("error", "Choose Approve or Reject."), 400)
      const decided = yield* approvals.decideByToken(fields["token"] ?? "", decision)
      if (Option.isNone(decided)) return gone()
      const status = decided.value.status
      return seeOther(`${REVIEW_PATH}?done=${status === "sent" ? "approved" : status === "failed" ? "failed" : "rejected"}`)
    }))
  }))
