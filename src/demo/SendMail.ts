/**
 * The demo's send-mail: the real request schema and the real field checks (`validateSend`), the
 * sender rule for the demo account's one address, then the sent email the real operation would answer,
 * derived from the request alone: nothing is sent, stored or counted, and the same request answers
 * the same sent email.
 */
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { CannotSendFromDomain, DiscardNotEnabled } from "../contract/Errors.js"
import { formatMailbox } from "../mail/Addresses.js"
import type { SendMail, SentEmail } from "../sending/Api.js"
import { sendInputOf } from "../sending/Batch.js"
import { validateSend } from "../sending/Sender.js"
import { DEMO_INBOX, DEMO_INBOX_ID, DEMO_NOW, demoAccount } from "./Dataset.js"

const [LOCAL, DOMAIN] = DEMO_INBOX.split("@") as [string, string]

/** The demo inbox, or one of its `+tag` forms. */
const isDemoSender = (address: string) => {
  const at = address.lastIndexOf("@")
  const local = address.slice(0, at)
  return address.slice(at + 1) === DOMAIN && (local === LOCAL || local.startsWith(`${LOCAL}+`))
}

/** A UUID (version 4 layout) from a digest: the same request, the same ids. */
const uuidOf = (hex: string) =>
  `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`

export const demoSendMail = (payload: SendMail) =>
  Effect.gen(function*() {
    // Schedules are checked against the real clock, as the real operation does.
    const v = yield* validateSend(yield* sendInputOf(Effect.succeed(DEMO_INBOX), payload), Date.now())
    if (!isDemoSender(v.from.address)) {
      return yield* new CannotSendFromDomain({
        message: `${v.from.address} is not an address this organization can send from (valid senders: ${DEMO_INBOX})`,
        details: { valid_senders: [DEMO_INBOX] }
      })
    }
    if (payload.discard_content === true && !demoAccount.discard_content_on_webhook_confirmed) {
      return yield* new DiscardNotEnabled({
        message: "discard_content needs discard_content_on_webhook_confirmed to be enabled on the account"
      })
    }
    const digest = createHash("sha256").update(JSON.stringify(payload)).digest("hex")
    const id = uuidOf(digest)
    const scheduled = payload.send_at !== undefined
    const sent: SentEmail = {
      id,
      status: scheduled ? "scheduled" : "sent",
      from: formatMailbox(v.from),
      to: v.to.map(formatMailbox),
      cc: v.cc.map(formatMailbox),
      bcc: v.bcc.map(formatMailbox),
      reply_to: v.replyTo === null ? null : formatMailbox(v.replyTo),
      subject: payload.subject,
      message_id: `<${id}@${DOMAIN}>`,
      thread_id: uuidOf(createHash("sha256").update(`thread:${digest}`).digest("hex")),
      inbox_id: v.from.address === DEMO_INBOX ? DEMO_INBOX_ID : null,
      in_reply_to: null,
      send_at: payload.send_at ?? null,
      sent_at: scheduled ? null : DEMO_NOW,
      created_at: DEMO_NOW,
      error: null,
      relay_response: scheduled ? null : "250 2.0.0 demo: accepted, nothing was sent",
      content_discarded: false,
      bounce: null
    }
    return sent
  })
