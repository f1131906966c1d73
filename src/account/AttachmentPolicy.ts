/**
 * The account's attachment policy: how many attachments, how large, which types (judged from the
 * content's bytes, src/mail/Sniff.ts; the declared type only where the bytes tell nothing), and what
 * happens to mail that breaks it: `reject` refuses it at DATA (`552 5.3.4`), `quarantine` stores it
 * held back.
 */
import { Schema } from "effect"
import type { ParsedAttachment } from "../mail/Parse.js"
import { matchesType } from "../mail/Sniff.js"

const TypeName = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128)).annotations({
  description: "a MIME type (application/pdf), a family (image/*), a kind (exe, elf, zip, rar, 7z, pdf, png, …) or the groups " +
    "`executable` and `archive`"
})

export const AttachmentPolicy = Schema.Struct({
  max_bytes: Schema.optionalWith(Schema.NullOr(Schema.Int.pipe(Schema.between(1, 50 * 1024 * 1024))), { exact: true })
    .annotations({ description: "largest single attachment in bytes; null: no limit" }),
  max_count: Schema.optionalWith(Schema.NullOr(Schema.Int.pipe(Schema.between(0, 1000))), { exact: true })
    .annotations({ description: "most attachments in one message; null: no limit" }),
  allowed_types: Schema.optionalWith(Schema.NullOr(Schema.Array(TypeName).pipe(Schema.maxItems(100))), { exact: true })
    .annotations({ description: "when set, every attachment must be one of these types" }),
  blocked_types: Schema.optionalWith(Schema.Array(TypeName).pipe(Schema.maxItems(100)), { exact: true })
    .annotations({ description: "no attachment may be one of these types" }),
  action: Schema.Literal("reject", "quarantine").annotations({
    description: "reject: refused over SMTP at DATA with 552 5.3.4; quarantine: stored, not delivered, until released"
  })
}).annotations({ identifier: "AttachmentPolicy", description: "applies to mail received by the account" })
export type AttachmentPolicy = typeof AttachmentPolicy.Type

/** Why the attachments break the policy; undefined when they do not. */
export const policyBreach = (policy: AttachmentPolicy, attachments: ReadonlyArray<ParsedAttachment>): string | undefined => {
  if (policy.max_count != null && attachments.length > policy.max_count) {
    return `more than ${policy.max_count} attachments`
  }
  for (const a of attachments) {
    const facts = { kind: a.kind ?? null, filename: a.filename, content_type: a.content_type }
    const name = a.filename ?? "an attachment"
    if (policy.max_bytes != null && a.size_bytes > policy.max_bytes) return `${name} is larger than ${policy.max_bytes} bytes`
    const blocked = (policy.blocked_types ?? []).find((t) => matchesType(t, facts))
    if (blocked !== undefined) return `${name} is of a blocked type (${blocked})`
    if (policy.allowed_types != null && !policy.allowed_types.some((t) => matchesType(t, facts))) {
      return `${name} is not of an allowed type`
    }
  }
  return undefined
}

/** A stored policy (`organizations.attachment_policy`, a jsonb the driver parsed or left as text); null when none is set. */
export const parsePolicy = (stored: unknown): AttachmentPolicy | null =>
  stored === null || stored === undefined ? null : (typeof stored === "string" ? JSON.parse(stored) : stored) as AttachmentPolicy

/** What the attachment policies of the organizations a message reaches decide about it. */
export interface AttachmentVerdict {
  /** Organizations whose policy rejects it, with the reason (safe to put in an SMTP reply). */
  readonly rejecting: ReadonlyMap<string, string>
  /** Organizations whose policy holds their copies back in quarantine. */
  readonly quarantining: ReadonlyArray<string>
}

/**
 * Judges the attachments against the policy of every organization reached (organization id →
 * its policy, or null when it sets none). The policies come with the recipients, read at RCPT
 * time, so judging costs no query.
 */
export const judgeAttachments = (
  policies: ReadonlyMap<string, AttachmentPolicy | null>,
  attachments: ReadonlyArray<ParsedAttachment>
): AttachmentVerdict => {
  const rejecting = new Map<string, string>()
  const quarantining: Array<string> = []
  for (const [orgId, policy] of policies) {
    if (policy === null) continue
    const breach = policyBreach(policy, attachments)
    if (breach === undefined) continue
    // The reason may quote a filename the sender chose: no control character reaches the reply.
    if (policy.action === "reject") rejecting.set(orgId, breach.replace(/[\u0000-\u001f\u007f]/g, "_"))
    else quarantining.push(orgId)
  }
  return { rejecting, quarantining }
}
