/**
 * Local delivery, the receiving side: mail the send path composes for an address this service
 * receives is stored through the same pipeline as mail arriving over SMTP (the recipient checks of
 * RCPT time, wake commands, analysis, spam threshold, store, threading, routes, functions, webhooks)
 * without a round trip through a relay or our own SMTP port. Registered into the send path's
 * `LocalDelivery` port by the composition root (src/Server.ts).
 *
 * A local recipient is refused as the SMTP listener would refuse it, and the send path reports it
 * like a relay refusing that recipient: no such mailbox at one of our domains `550 5.1.1`, a wake
 * address whose allowlist does not name the sender `550 5.7.1`, no room `452 4.2.2`, spam above the
 * recipient's threshold `550 5.7.1`, a database failure `451 4.3.0` (nothing stored). The receiving
 * organizations' attachment policies apply as over SMTP: `reject` refuses that organization's
 * recipients with `552 5.3.4` (over SMTP the whole message is refused at DATA; here each recipient
 * has its own answer, so other organizations still get it), `quarantine` stores its copies held back.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Option, Schema } from "effect"
import { WebhookSecrets } from "../account/WebhookSecret.js"
import { AppConfig } from "../platform/Config.js"
import { allRows } from "../platform/Rows.js"
import { LocalDelivery, type LocalMessage, type LocalOutcome, type LocalReceiver, type LocalRefusal } from "../sending/LocalDelivery.js"
import { judgeAttachments } from "../account/AttachmentPolicy.js"
import { hasRoomFor } from "../routes/Resolver.js"
import { mayCommand } from "../mail/WakeMessage.js"
import type { Analysis } from "./Analyze.js"
import { MessageAnalysis } from "./AnalyzePool.js"
import type { AuthResults } from "./Authenticity.js"
import { checkCommand } from "./Commands.js"
import { copyKey, normalizeAddress, type Recipient, Recipients } from "./Recipients.js"
import { scoreSpam } from "./SpamScore.js"
import { EmailStoredHooks, InboundStore } from "./Store.js"

const domainOf = (address: string) => address.slice(address.lastIndexOf("@") + 1)

/**
 * Why local mail is authenticated without asking DNS. The SMTP path proves a From address with
 * DMARC: an SPF-authorized host or a DKIM signature, aligned with the From domain, whose key the
 * domain publishes. Here the message never left the service: the send path checked that the sending
 * organization may send from its From address (its managed inbox, or a domain it verified), composed
 * it and signed it with the key this service holds for that domain. Looking our own key up in DNS
 * and checking our own signature would only ask the Internet what the database already says (and
 * would fail for a domain whose owner has not published the record yet, or in a test without DNS).
 * So the results are what that proof amounts to: SPF `pass` (the host that handed the message over
 * is this service, sending for a sender it authorized), DKIM `pass` when the service signed it,
 * DMARC `pass` (both aligned with the From domain), and the From address is proven and may become
 * a known sender. Only a From the send path checked gets this: anything else keeps no result.
 */
export const localAuthentication = (analysis: Analysis, message: LocalMessage): Analysis => {
  const from = analysis.parsed.from?.address ?? null
  if (from === null || from.trim().toLowerCase() !== message.from.toLowerCase()) return analysis
  const auth: AuthResults = { spf: "pass", dkim: message.signed ? "pass" : "none", dmarc: "pass" }
  return {
    ...analysis,
    auth,
    authenticatedFrom: from,
    knownFrom: from.trim().toLowerCase(),
    spam: scoreSpam(analysis.parsed, auth)
  }
}

/** Rows of "verified domains". */
const VerifiedDomainsRow = Schema.Struct({ domain: Schema.String })

export const LocalReceiverLive = Layer.scopedDiscard(Effect.gen(function*() {
  const port = yield* LocalDelivery
  const config = yield* AppConfig
  const sql = yield* SqlClient.SqlClient
  const secrets = yield* WebhookSecrets
  const recipients = yield* Recipients
  const store = yield* InboundStore
  // The hooks stored with each email (its deliveries, the payments rail), as the SMTP listener has them.
  const hooks = yield* EmailStoredHooks
  const managed = config.managedInboxDomain.toLowerCase()
  const pool = yield* MessageAnalysis

  /** Verified, active domains (of any organization) among these. */
  const ourDomains = (domains: ReadonlyArray<string>) =>
    domains.length === 0
      ? Effect.succeed(new Set<string>())
      : sql`
          SELECT DISTINCT domain FROM domains
          WHERE domain IN ${sql.in(domains)} AND verified_at IS NOT NULL AND is_active`.pipe(
          allRows(VerifiedDomainsRow, "verified domains"),
          Effect.map((rows) => new Set(rows.map((r) => r.domain))),
          Effect.orDie
        )

  const receives: LocalReceiver["receives"] = (addresses, read) =>
    Effect.gen(function*() {
      const domains = [...new Set(addresses.map((a) => domainOf(normalizeAddress(a))).filter((d) => d !== managed))]
      // The send path read these with its other state moments ago: no statement unless one is missing.
      const verified = read !== undefined && domains.every((d) => read.asked.has(d)) ? read.verified : yield* ourDomains(domains)
      return new Set(addresses.filter((a) => {
        const d = domainOf(normalizeAddress(a))
        return d === managed || verified.has(d)
      }))
    })

  /** The RCPT-time checks of one address: its recipient, or the SMTP refusal. */
  const admit = (address: string, envelopeFrom: string, size: number) =>
    Effect.gen(function*() {
      const found = yield* recipients.lookup(address)
      if (Option.isNone(found)) return { code: 550, response: `5.1.1 <${address}>: no such mailbox here` }
      const wake = found.value.wake
      if (wake !== null && !mayCommand(envelopeFrom, wake.allowlist)) {
        return { code: 550, response: `5.7.1 <${address}>: this wake address takes commands only from senders on its allowlist` }
      }
      if (!hasRoomFor(found.value.org, size)) {
        return { code: 452, response: `4.2.2 <${address}>: mailbox full, try again later` }
      }
      return found.value
    }).pipe(Effect.catchAll(() => Effect.succeed({ code: 451, response: `4.3.0 <${address}>: temporary lookup failure, try again later` })))

  const deliver = (message: LocalMessage): Effect.Effect<LocalOutcome> =>
    Effect.gen(function*() {
      const refused: Array<LocalRefusal> = []
      const accepted: Array<{ readonly address: string; readonly recipient: Recipient }> = []
      for (const address of message.envelope.to) {
        const r = yield* admit(address, message.envelope.from, message.raw.length)
        if ("code" in r) refused.push({ address, ...r })
        else accepted.push({ address, recipient: r })
      }
      const refuseAll = (code: number, response: string, those = accepted): LocalOutcome => ({
        stored: [],
        delivered: [],
        refused: [...refused, ...those.map(({ address }) => ({ address, code, response }))]
      })
      if (accepted.length === 0) return { stored: [], delivered: [], refused }
      const rcpts = accepted.map((a) => a.recipient)
      const checked = yield* checkCommand(message.raw, rcpts).pipe(
        Effect.provideService(WebhookSecrets, secrets),
        Effect.provideService(SqlClient.SqlClient, sql)
      )
      if (checked._tag === "NoCommand") return refuseAll(554, `5.6.0 A wake address takes a command: ${checked.problem}`)
      if (checked._tag === "Refused") return refuseAll(550, checked.reason)
      const analysis = localAuthentication(yield* Effect.promise(() => pool.analyze(message.raw, null)), message)
      // Attachment policies of the organizations reached (a wake address takes commands, not mail).
      const policies = new Map(accepted.filter((a) => a.recipient.wake === null).map((a) => [a.recipient.orgId, a.recipient.org.attachmentPolicy]))
      const { rejecting, quarantining: policyQuarantine } = judgeAttachments(policies, analysis.parsed.attachments)
      for (const a of accepted.filter((a) => a.recipient.wake === null && rejecting.has(a.recipient.orgId))) {
        refused.push({
          address: a.address,
          code: 552,
          response: `5.3.4 Message refused by the recipient's attachment policy: ${rejecting.get(a.recipient.orgId)}`
        })
      }
      const admitted = accepted.filter((a) => a.recipient.wake !== null || !rejecting.has(a.recipient.orgId))
      if (admitted.length === 0) return { stored: [], delivered: [], refused }
      const stored = yield* store.store({
        raw: message.raw,
        envelopeFrom: message.envelope.from,
        clientAddress: null,
        helo: null,
        ...analysis,
        command: checked.command,
        policyQuarantine
      }, admitted.map((a) => a.recipient)).pipe(
        Effect.provideService(EmailStoredHooks, hooks),
        Effect.map((copies) => ({ _tag: "Stored", copies } as const)),
        Effect.catchTag("StorageQuotaExceeded", () => Effect.succeed({ _tag: "Full" } as const)),
        Effect.catchAllCause((cause) =>
          Effect.as(Effect.logError("local delivery not committed", cause), { _tag: "Failed" } as const)
        )
      )
      if (stored._tag === "Full") {
        return refuseAll(452, "4.2.2 Mailbox full: the message exceeds the recipient's storage quota, try again later", admitted)
      }
      if (stored._tag === "Failed") return refuseAll(451, "4.3.0 Temporary failure storing the message, try again later", admitted)
      // Several addresses may share one copy (copyKey): each gets its copy's fate.
      const statusOf = new Map(stored.copies.map((c) => [copyKey(c.recipient), c.status]))
      const delivered: Array<string> = []
      for (const { address, recipient } of admitted) {
        if (statusOf.get(copyKey(recipient)) === "rejected") {
          refused.push({ address, code: 550, response: "5.7.1 Message rejected as spam" })
        } else delivered.push(address)
      }
      return { stored: stored.copies.filter((c) => c.status === "accepted").map((c) => c.id), delivered, refused }
    }).pipe(Effect.withSpan("LocalReceiver.deliver"))

  yield* port.register({ receives, deliver })
})).pipe(Layer.provide(MessageAnalysis.Default))
