/**
 * Send approval. With the account's `send_approval`, a send that needs a person's approval is held
 * as a draft instead of sent: `new_recipients` holds a send with a recipient the organization never
 * sent to nor received from, `all` holds every send. Holding a draft emits `draft.created` and
 * mails the owner a single-use link to approve or reject it. Approving sends it through the
 * ordinary send path, exactly once (the decision is one conditional UPDATE).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { randomUUID } from "node:crypto"
import { Conflict, NotFound } from "../contract/Errors.js"
import type { Principal } from "../contract/Security.js"
import { OrgEvents } from "../events/OrgEvents.js"
import { Mailer } from "../mail/Mailer.js"
import { AppConfig } from "../platform/Config.js"
import { randomToken, sha256Hex } from "../platform/Secrets.js"
import { parseMailbox } from "../mail/Addresses.js"
import { type ApprovalSetting, codeOf, Sender, type SendInput } from "../sending/Sender.js"
import { escapeHtml } from "../identity/Html.js"
import { type Draft, DRAFT_TTL_DAYS } from "./Api.js"
import { type DraftRow, DraftsRepo, fromStored, toDraft } from "./Repo.js"

export const REVIEW_PATH = "/drafts/review"

const addressOfInput = (text: string) => {
  const m = parseMailbox(text)
  return typeof m === "string" ? text.trim().toLowerCase() : m.address
}

/** The draft as the `draft.created` event carries it. */
export const draftEventData = (d: Draft) => ({
  draft: {
    id: d.id,
    status: d.status,
    kind: d.kind,
    reason: d.reason,
    new_recipients: d.new_recipients,
    from: d.from,
    to: d.to,
    cc: d.cc,
    bcc: d.bcc,
    subject: d.subject,
    created_at: d.created_at.toISOString(),
    expires_at: d.expires_at.toISOString()
  }
})

export class Approvals extends Effect.Service<Approvals>()("mailroom/Approvals", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* DraftsRepo
    const events = yield* OrgEvents
    const mailer = yield* Mailer
    const sender = yield* Sender
    const config = yield* AppConfig

    const notifyOwner = (owner: string, draft: Draft, token: string) => {
      const link = `${config.publicBaseUrl}${REVIEW_PATH}?token=${token}`
      const to = [...draft.to, ...draft.cc, ...draft.bcc].join(", ")
      const text = `A send is waiting for your approval.\n\nFrom: ${draft.from}\nTo: ${to}\nSubject: ${draft.subject}\n\n` +
        `Approve or reject it here (the link works once, for ${DRAFT_TTL_DAYS} days):\n${link}\n\n` +
        `Or: mailroom drafts approve ${draft.id}\n`
      const html = `<p>A send is waiting for your approval.</p><p>From: ${escapeHtml(draft.from)}<br>To: ${escapeHtml(to)}<br>` +
        `Subject: ${escapeHtml(draft.subject)}</p><p><a href="${escapeHtml(link)}">Approve or reject it</a> (the link works once, ` +
        `for ${DRAFT_TTL_DAYS} days).</p>`
      // The draft stands whether or not the mail goes out: the API and the CLI decide it too.
      return mailer.send({ to: owner, subject: `Approve a send: ${draft.subject}`, text, html }).pipe(
        Effect.catchAll((e) => Effect.logWarning(`approval mail for draft ${draft.id} not sent: ${e.reason}`))
      )
    }

    /** The draft a send becomes when it needs approval; None when it may go now. */
    const hold = (principal: Principal, input: SendInput, known?: ApprovalSetting): Effect.Effect<Option.Option<Draft>> =>
      Effect.gen(function*() {
        // The send path reads the setting with the rest of its state: with none, nothing more to read.
        if (known === "none") return Option.none()
        const setting = yield* repo.setting(principal.orgId)
        if (setting.send_approval === "none") return Option.none()
        const recipients = [...new Set([...input.to, ...input.cc, ...input.bcc].map(addressOfInput))]
        const fresh = yield* repo.unknownAmong(principal.orgId, recipients)
        if (setting.send_approval === "new_recipients" && fresh.length === 0) return Option.none()
        const token = randomToken(43)
        const row = yield* Effect.gen(function*() {
          const row = yield* repo.insert({
            id: randomUUID(),
            orgId: principal.orgId,
            input,
            reason: setting.send_approval === "all" ? "all" : "new_recipients",
            newRecipients: fresh,
            recipients,
            fromAddress: addressOfInput(input.from),
            tokenHash: sha256Hex(token),
            keyId: principal.credential.kind === "api_key" ? principal.credential.id : null,
            ttlDays: DRAFT_TTL_DAYS
          })
          // The event exists exactly when the draft does.
          yield* events.emit({
            orgId: principal.orgId,
            eventType: "draft.created",
            data: draftEventData(toDraft(row)),
            createdAt: new Date(yield* Clock.currentTimeMillis)
          })
          return row
        }).pipe(sql.withTransaction)
        const draft = toDraft(row)
        if (setting.owner_email !== null) yield* notifyOwner(setting.owner_email, draft, token)
        return Option.some(draft)
      }).pipe(Effect.orDie)

    /** Sends an approved draft (once: only the decision's winner gets here) and records the outcome. */
    const dispatch = (row: DraftRow) =>
      Effect.gen(function*() {
        const stored = fromStored(row.input)
        const now = yield* Clock.currentTimeMillis
        // A send scheduled for a time that passed while it waited goes now.
        const input = stored.sendAt !== null && stored.sendAt.getTime() <= now ? { ...stored, sendAt: null } : stored
        const sent = yield* Effect.either(sender.submit(row.org_id, input))
        const finished = yield* repo.finish(
          row.id,
          sent._tag === "Right" ? { sentEmailId: sent.right.id } : { error: { code: codeOf(sent.left), message: sent.left.message } }
        )
        return toDraft(finished)
      })

    /** Why a decision found nothing pending: 404, or 409 with the state the draft is in. */
    const undecidable = (orgId: string, id: string) =>
      Effect.flatMap(repo.find(orgId, id), (found): Effect.Effect<never, NotFound | Conflict> => {
        if (Option.isNone(found)) return Effect.fail(new NotFound({ message: `no draft ${id}` }))
        const d = toDraft(found.value)
        return Effect.fail(new Conflict({ message: `draft ${id} is ${d.status}: only a pending draft can be decided`, details: { status: d.status } }))
      })

    const approve = (orgId: string, id: string): Effect.Effect<Draft, NotFound | Conflict> =>
      Effect.gen(function*() {
        const won = yield* repo.decide({ orgId, id }, "approved", "api").pipe(Effect.orDie)
        if (Option.isNone(won)) return yield* undecidable(orgId, id).pipe(Effect.catchTag("SqlError", Effect.die))
        return yield* dispatch(won.value).pipe(Effect.orDie)
      })

    const reject = (orgId: string, id: string): Effect.Effect<Draft, NotFound | Conflict> =>
      Effect.gen(function*() {
        const won = yield* repo.decide({ orgId, id }, "rejected", "api").pipe(Effect.orDie)
        if (Option.isNone(won)) return yield* undecidable(orgId, id).pipe(Effect.catchTag("SqlError", Effect.die))
        return toDraft(won.value)
      })

    /** The draft a link's token names, while the token is unspent. */
    const byToken = (token: string) =>
      repo.byToken(sha256Hex(token)).pipe(Effect.map(Option.map((r) => ({ draft: toDraft(r), text: r.input.text }))), Effect.orDie)

    /** The link's decision: None when the token is spent, unknown or its draft expired. */
    const decideByToken = (token: string, decision: "approve" | "reject") =>
      Effect.gen(function*() {
        const won = yield* repo.decide({ tokenHash: sha256Hex(token) }, decision === "approve" ? "approved" : "rejected", "link")
        if (Option.isNone(won)) return Option.none<Draft>()
        return Option.some(decision === "approve" ? yield* dispatch(won.value) : toDraft(won.value))
      }).pipe(Effect.orDie)

    const list = (orgId: string, status: Draft["status"] | undefined) =>
      repo.list(orgId, status).pipe(Effect.map((rows) => rows.map(toDraft)), Effect.orDie)

    const get = (orgId: string, id: string) =>
      Effect.flatMap(repo.find(orgId, id).pipe(Effect.orDie), Option.match({
        onNone: () => Effect.fail(new NotFound({ message: `no draft ${id}` })),
        onSome: (r) => Effect.succeed(toDraft(r))
      }))

    return { hold, approve, reject, byToken, decideByToken, list, get } as const
  })
}) {}
