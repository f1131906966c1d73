/**
 * The trust annotation every stored email carries (API and payloads): who is proven to have sent
 * it and what its content raises. Facts about the sender are taken as the mail arrives
 * (src/inbound/SenderFacts.ts): `sender_known` says the organization knew the address before this
 * message, not after it.
 */
import { Schema } from "effect"
import { SIGNALS } from "./Signals.js"

export const SignalName = Schema.Literal(...SIGNALS).annotations({
  description: "ai_instructions: text telling an AI reader what to do; hidden_text: HTML text a reader cannot see; " +
    "invisible_unicode: tag characters, bidi overrides or zero-width runs; link_mismatch: a link's text names another " +
    "site than it opens; executable_attachment / archive_attachment: judged from the content's bytes and the name; " +
    "reply_to_mismatch: Reply-To on another domain than From"
})

export const TrustSchema = Schema.Struct({
  sender_authenticated: Schema.Boolean.annotations({ description: "the From address passed DMARC or carries an aligned DKIM signature" }),
  sender_known: Schema.Boolean.annotations({ description: "the organization knew the From address before (it had written in authenticated)" }),
  registry_verified: Schema.Boolean.annotations({ description: "the authenticated From is a published registry entry" }),
  auto_submitted: Schema.Boolean.annotations({ description: "an automaton sent it (Auto-Submitted, Precedence bulk/junk/list)" }),
  signals: Schema.Array(Schema.String).annotations({
    description: "content signals, from deterministic rules; each one of: " + SIGNALS.join(", ")
  })
}).annotations({ identifier: "Trust", description: "how far the email can be trusted, as judged when it arrived" })
export type Trust = typeof TrustSchema.Type

/** Mail stored before trust was recorded: nothing proven, nothing raised. */
export const UNKNOWN_TRUST: Trust = { sender_authenticated: false, sender_known: false, registry_verified: false, auto_submitted: false, signals: [] }
