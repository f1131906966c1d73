/** SQL of drafts: held sends, decided once. Rows are decoded, so a renamed column dies naming the statement. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import type { SendInput } from "../sending/Sender.js"
import { allRows, Enum, firstRow, JsonColumn, NullableTimestamp, TextArray, Timestamp } from "../platform/Rows.js"
import type { Draft } from "./Api.js"

/**
 * The stored send (`toStored`), checked as far as the drafts read it (addresses and `sendAt`); the
 * rest is the sending area's input, written by this module only.
 */
const StoredInputColumn = Schema.declare(
  (u: unknown): u is StoredInput =>
    typeof u === "object" && u !== null && typeof (u as { from?: unknown }).from === "string" &&
    ["to", "cc", "bcc"].every((k) => Array.isArray((u as Record<string, unknown>)[k])) &&
    ((u as { sendAt?: unknown }).sendAt === null || typeof (u as { sendAt?: unknown }).sendAt === "string"),
  { identifier: "StoredInput" }
)

export const DraftRow = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  kind: Enum("send", "reply", "forward"),
  status: Enum("pending_approval", "approved", "rejected", "sent", "failed"),
  reason: Enum("all", "new_recipients"),
  new_recipients: TextArray,
  from_address: Schema.String,
  subject: Schema.String,
  input: JsonColumn(StoredInputColumn),
  created_at: Timestamp,
  expires_at: Timestamp,
  decided_at: NullableTimestamp,
  sent_email_id: Schema.NullOr(Schema.String),
  error: Schema.NullOr(JsonColumn(Schema.Struct({ code: Schema.String, message: Schema.String }))),
  /** Whether it is past its expiry (computed by the database, whose clock decides). */
  expired: Schema.Boolean
})
export type DraftRow = typeof DraftRow.Type

const Setting = Schema.Struct({ send_approval: Enum("none", "new_recipients", "all"), owner_email: Schema.NullOr(Schema.String) })

/** A SendInput as JSON (`sendAt` as an ISO string). */
export type StoredInput = Omit<SendInput, "sendAt"> & { readonly sendAt: string | null }

export const toStored = (input: SendInput): StoredInput => ({ ...input, sendAt: input.sendAt?.toISOString() ?? null })
export const fromStored = (input: StoredInput): SendInput => ({ ...input, sendAt: input.sendAt === null ? null : new Date(input.sendAt) })

export const toDraft = (r: DraftRow): Draft => ({
  id: r.id,
  status: r.status === "pending_approval" && r.expired ? "expired" : r.status,
  kind: r.kind,
  reason: r.reason,
  new_recipients: r.new_recipients,
  from: r.input.from,
  to: r.input.to,
  cc: r.input.cc,
  bcc: r.input.bcc,
  subject: r.subject,
  created_at: r.created_at,
  expires_at: r.expires_at,
  decided_at: r.decided_at,
  sent_email_id: r.sent_email_id,
  error: r.error
})

/** Rows of "unknown recipients". */
const UnknownRecipientsRow = Schema.Struct({ a: Schema.String })

export class DraftsRepo extends Effect.Service<DraftsRepo>()("mailroom/DraftsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.unsafe(`id, org_id, kind, status, reason, new_recipients, from_address, subject, input, created_at,
      expires_at, decided_at, sent_email_id, error, (status = 'pending_approval' AND expires_at <= now()) AS expired`)

    const insert = (d: {
      readonly id: string
      readonly orgId: string
      readonly input: SendInput
      readonly reason: Draft["reason"]
      readonly newRecipients: ReadonlyArray<string>
      readonly recipients: ReadonlyArray<string>
      readonly fromAddress: string
      readonly tokenHash: string
      readonly keyId: string | null
      readonly ttlDays: number
    }) =>
      sql`
        INSERT INTO drafts (id, org_id, kind, reason, new_recipients, from_address, recipients, subject, input,
                            created_by_key, approval_token_hash, expires_at)
        VALUES (${d.id}, ${d.orgId}, ${d.input.kind}, ${d.reason}, ${d.newRecipients}::text[], ${d.fromAddress},
                ${d.recipients}::text[], ${d.input.subject}, ${JSON.stringify(toStored(d.input))}::jsonb, ${d.keyId},
                ${d.tokenHash}, now() + make_interval(days => ${d.ttlDays}))
        RETURNING ${columns}`.pipe(allRows(DraftRow, "draft insert"), Effect.map((rows) => rows[0]!))

    const find = (orgId: string, id: string) =>
      sql`SELECT ${columns} FROM drafts WHERE org_id = ${orgId} AND id = ${id}`.pipe(firstRow(DraftRow, "draft find"))

    const byToken = (tokenHash: string) =>
      sql`SELECT ${columns} FROM drafts WHERE approval_token_hash = ${tokenHash}`.pipe(firstRow(DraftRow, "draft by token"))

    const list = (orgId: string, status: Draft["status"] | undefined) =>
      sql`
        SELECT ${columns} FROM drafts WHERE org_id = ${orgId}
        ${
        status === undefined ? sql`` : status === "expired"
          ? sql`AND status = 'pending_approval' AND expires_at <= now()`
          : status === "pending_approval"
          ? sql`AND status = 'pending_approval' AND expires_at > now()`
          : sql`AND status = ${status}`
      }
        ORDER BY created_at DESC, id DESC LIMIT 100`.pipe(allRows(DraftRow, "draft list"))

    /**
     * Decides a pending, unexpired draft: one statement, so of two concurrent decisions exactly one
     * finds it pending. The link's token is spent with it. None: nothing pending to decide.
     */
    const decide = (where: { readonly orgId: string; readonly id: string } | { readonly tokenHash: string }, to: "approved" | "rejected", via: "api" | "link") =>
      sql`
        UPDATE drafts SET status = ${to}, decided_at = now(), decided_via = ${via}, approval_token_hash = NULL
        WHERE ${"tokenHash" in where ? sql`approval_token_hash = ${where.tokenHash}` : sql`org_id = ${where.orgId} AND id = ${where.id}`}
          AND status = 'pending_approval' AND expires_at > now()
        RETURNING ${columns}`.pipe(firstRow(DraftRow, "draft decide"))

    const finish = (id: string, outcome: { readonly sentEmailId: string } | { readonly error: { code: string; message: string } }) =>
      sql`
        UPDATE drafts SET
          status = ${"sentEmailId" in outcome ? "sent" : "failed"},
          sent_email_id = ${"sentEmailId" in outcome ? outcome.sentEmailId : null},
          error = ${"error" in outcome ? JSON.stringify(outcome.error) : null}::jsonb
        WHERE id = ${id} RETURNING ${columns}`.pipe(allRows(DraftRow, "draft finish"), Effect.map((rows) => rows[0]!))

    /**
     * Which of `addresses` (lowercased) this organization never sent to nor received from: new
     * recipients. Received from: `known_addresses`; sent to: a recipient of one of its sent emails.
     */
    const unknownAmong = (orgId: string, addresses: ReadonlyArray<string>) =>
      addresses.length === 0 ? Effect.succeed([] as ReadonlyArray<string>) : sql`
        SELECT a FROM unnest(${addresses}::text[]) AS a
        WHERE NOT EXISTS (SELECT 1 FROM known_addresses k WHERE k.org_id = ${orgId} AND k.address = a)
          AND NOT EXISTS (
            SELECT 1 FROM sent_emails s, jsonb_array_elements_text(s.to_addresses || s.cc_addresses || s.bcc_addresses) AS r
            WHERE s.org_id = ${orgId} AND s.status = 'sent' AND (lower(r) = a OR right(lower(r), length(a) + 2) = '<' || a || '>'))`.pipe(
        allRows(UnknownRecipientsRow, "unknown recipients"),
        Effect.map((rows) => rows.map((r) => r.a))
      )

    const setting = (orgId: string) =>
      sql`
        SELECT o.send_approval,
               (SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id
                 WHERE m.org_id = o.id AND m.role = 'owner' ORDER BY m.created_at LIMIT 1) AS owner_email
        FROM organizations o WHERE o.id = ${orgId}`.pipe(
        allRows(Setting, "send approval setting"),
        Effect.map((rows) => rows[0] ?? { send_approval: "none" as const, owner_email: null })
      )

    return { insert, find, byToken, list, decide, finish, unknownAmong, setting } as const
  })
}) {}
