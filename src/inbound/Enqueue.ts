/**
 * Routing of a stored inbound email to its delivery: route → domain
 * default → organization fallback (resolved with the recipient at RCPT time), then the
 * organization's filters, then the endpoint's rules and `event_types`. A match enqueues one delivery
 * with its event payload built once (stable event id), in the very statement that stores the email.
 * No match: the email stays visible through the API, and its event goes to the organization's event
 * log only (the `/v1/events` stream).
 */
import { Effect, Option } from "effect"
import { downloadUrls, linksOf } from "../emails/Present.js"
import { DownloadTokens } from "../emails/DownloadTokens.js"
import { replyTextOf } from "../mail/ReplyText.js"
import { evaluateFilters, evaluateRules } from "../filters/Evaluate.js"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { type EmailStoredHook, eventOf, type InboundMessage, type StoredEmail } from "./Store.js"
import { isAutoSubmitted } from "./Classify.js"
import { AppConfig } from "../platform/Config.js"
import { RegistryDirectory, type VerifiedSender } from "../registries/Directory.js"
import { verifyCommand } from "../mail/WakeMessage.js"
import { buildEmailEvent, newEventId, type RegistrySender, serializeEvent, type WakePayload } from "../webhooks/Payload.js"
import { EventLog } from "../events/Log.js"
import { DeliveryQueue } from "../deliveries/Queue.js"

export const senderOf = (m: InboundMessage) => m.parsed.from?.address ?? m.envelopeFrom ?? ""

/** `sender`: absent when the From is no verified entry, one object for one, a list for several. */
const senderField = (senders: ReadonlyArray<VerifiedSender>): { readonly sender?: RegistrySender | ReadonlyArray<RegistrySender> } => {
  const all = senders.map((s): RegistrySender => ({ registry: s.registry, handle: s.handle, verified: true }))
  return all.length === 0 ? {} : { sender: all.length === 1 ? all[0]! : all }
}

/** The delivery hook stored with each email (one of the `EmailStoredHooks` the composition root provides). */
export class DeliveryHook extends Effect.Service<DeliveryHook>()("mailroom/DeliveryHook", {
  effect: Effect.gen(function*() {
    const queue = yield* DeliveryQueue
    const tokens = yield* DownloadTokens
    const config = yield* AppConfig
    const directory = yield* RegistryDirectory
    const secrets = yield* WebhookSecrets
    const log = yield* EventLog

    /**
     * The `wake` object of a `wake.command`: what the command says, and `verified` when the
     * organization's webhook secret (current, or previous within its grace) signed it. Only a
     * verified command speaks for a wake (`id`, `scheduled_for`).
     */
    const wakeOf = (email: StoredEmail, message: InboundMessage, receivedAt: Date) =>
      Effect.gen(function*() {
        const c = message.command!
        // Signed for this very function (SmtpServer refuses a retargeted or replayed one at DATA);
        // a firing's own command was signed a moment ago with the current secret: not read again.
        const forThisFunction = c.functionId !== null && c.functionId === email.recipient.wake?.functionId
        const verified = forThisFunction && (message.commandSignedHere === true ||
          verifyCommand(c.signature, c.json, Option.getOrElse(yield* secrets.signing(email.orgId), () => []), receivedAt.getTime()))
        return {
          id: verified ? c.wakeId : null,
          type: c.type,
          payload: c.payload,
          scheduled_for: verified ? c.scheduledFor : null,
          fired_at: (verified ? c.firedAt : null) ?? receivedAt.toISOString(),
          thread_id: verified ? c.threadId : null,
          // Who is proven to have sent it: the authenticated From, else the envelope sender the allowlist admitted.
          sender: message.authenticatedFrom ?? message.envelopeFrom ?? "",
          verified
        } satisfies WakePayload
      })

    /**
     * The published registry entries the message's authenticated From is, looked up once per message
     * (its copies share the answer) and only for mail that proves its From and has somewhere to go.
     */
    const verified = new WeakMap<InboundMessage, Effect.Effect<ReadonlyArray<VerifiedSender>>>()
    const verifiedSendersOf = (message: InboundMessage) =>
      Effect.suspend(() => {
        const from = message.authenticatedFrom
        if (from === null) return Effect.succeed<ReadonlyArray<VerifiedSender>>([])
        const known = verified.get(message)
        if (known !== undefined) return known
        return Effect.flatMap(Effect.cached(directory.verifiedSenders(from)), (lookup) => {
          verified.set(message, lookup)
          return lookup
        })
      })

    const hook: EmailStoredHook = (email: StoredEmail, message: InboundMessage) =>
      Effect.gen(function*() {
        const destination = email.recipient.resolution.endpoint
        const sender = senderOf(message)
        const senders = yield* verifiedSendersOf(message)
        const registries = senders.map((s) => s.registry)
        // Filtered mail is no event at all; an endpoint's own rules only decide its delivery.
        if (!evaluateFilters(email.recipient.filters, sender, registries).allowed) return Option.none()
        const p = message.parsed
        const attachmentBytes = p.attachments.reduce((n, a) => n + a.size_bytes, 0)
        const eventType = eventOf(email.recipient, message)
        const endpoint = Option.filter(destination, (e) =>
          evaluateRules(e.rules, {
            sender,
            sizeBytes: message.raw.length,
            attachmentBytes,
            attachmentCount: p.attachments.length,
            eventType
          }).deliver)
        const urls = yield* downloadUrls(config.publicBaseUrl, email.id, p.attachments.length).pipe(
          Effect.provideService(DownloadTokens, tokens)
        )
        const eventId = newEventId()
        const createdAt = new Date()
        const wake = eventType === "wake.command" ? yield* wakeOf(email, message, createdAt) : undefined
        const event = buildEmailEvent({
          eventId,
          event: eventType,
          createdAt,
          ...(wake !== undefined ? { wake } : {}),
          email: {
            id: email.id,
            thread_id: email.threadId,
            inbox_id: email.recipient.inboxId,
            message_id: p.messageId,
            from: p.from ? (p.from.name ? `${p.from.name} <${p.from.address}>` : p.from.address) : (message.envelopeFrom ?? ""),
            ...senderField(senders),
            to: p.to,
            recipient: email.recipient.address,
            subject: p.subject ?? "",
            date: p.date?.toISOString() ?? null,
            in_reply_to: p.inReplyTo,
            references: p.references,
            text: p.text,
            html: p.html,
            extracted_text: replyTextOf(p),
            headers: p.headers,
            size_bytes: message.raw.length,
            spam_score: message.spam.score,
            auth: message.auth,
            auto_submitted: isAutoSubmitted(p.headers),
            trust: email.trust,
            ...linksOf(p.attachments, urls)
          }
        })
        const payload = serializeEvent(event)
        // A delivered event is logged from its delivery row (migrations/0140); one without carries its payload.
        if (Option.isNone(endpoint)) return Option.some(log.appendStatement({ orgId: email.orgId, eventId, eventType, payload }))
        return Option.some(queue.enqueueStatement({
          orgId: email.orgId,
          emailId: email.id,
          endpointId: endpoint.value.id,
          eventId,
          eventType,
          payload,
          sender,
          recipient: email.recipient.address,
          subject: p.subject ?? ""
        }))
      })

    return { hook } as const
  }),
  dependencies: [EventLog.Default]
}) {}
