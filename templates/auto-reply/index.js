/**
 * auto-reply: answers each verified `email.received` through `env.MAILROOM` (POST
 * /v1/emails/{id}/reply: the reply goes to the original's Reply-To or From, threaded, from the
 * address it was received at). As RFC 3834 asks of automatic responders it never answers automatic
 * mail (Auto-Submitted other than "no", Precedence bulk/list/junk, List-Id, bounces and
 * no-reply/daemon senders) and answers one sender at most once a day (remembered in MEMORY).
 */
const encoder = new TextEncoder()
const DEFAULT_TEXT = "Thanks for your message: it arrived, and we will get back to you soon.\n\n(This is an automatic reply.)"
const ONCE_PER_SECONDS = 24 * 60 * 60

async function verified(header, body, secret) {
  const t = /(?:^|,)t=(\d+)/.exec(header ?? "")?.[1]
  if (!t || !secret || Math.abs(Date.now() / 1000 - Number(t)) > 300) return false
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"])
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(`${t}.${body}`)))
  const expected = Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("")
  return header.split(",").some((part) => part.startsWith("v1=") && sameText(part.slice(3), expected))
}

function sameText(a, b) {
  if (a.length !== b.length) return false
  let diff = 0
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i)
  return diff === 0
}

function addressOf(from) {
  const m = /<([^<>]+)>\s*$/.exec(from ?? "")
  return (m ? m[1] : from ?? "").trim().toLowerCase()
}

/** Header lookup by name in any letter case (the payload keeps names as the sender wrote them). */
function headerOf(headers, name) {
  for (const [k, v] of Object.entries(headers ?? {})) if (k.toLowerCase() === name) return String(v)
  return undefined
}

/** Why not to answer, or undefined when an answer is fine. */
function automatic(email, sender) {
  if (email.auto_submitted === true) return "auto-submitted mail"
  const auto = headerOf(email.headers, "auto-submitted")
  if (auto !== undefined && auto.trim().toLowerCase() !== "no") return "auto-submitted mail"
  if (/^(bulk|list|junk)$/i.test((headerOf(email.headers, "precedence") ?? "").trim())) return "bulk or list mail"
  if (headerOf(email.headers, "list-id") !== undefined) return "mailing list mail"
  if (sender === "" || /^(mailer-daemon|postmaster|no-?reply|do-?not-?reply|noreply)([+@]|$)/.test(sender)) return "no one to answer"
  return undefined
}

export default {
  async fetch(request, env) {
    const body = await request.text()
    if (!(await verified(request.headers.get("mailroom-signature"), body, env.MAILROOM_WEBHOOK_SECRET))) {
      return new Response("the signature does not verify", { status: 401 })
    }
    const event = JSON.parse(body)
    if (event.event !== "email.received") return new Response(`ignored ${event.event}`)
    const sender = addressOf(event.email.from)
    const skip = automatic(event.email, sender)
    if (skip !== undefined) return new Response(`not answered: ${skip}`)
    if (sender === addressOf(event.email.recipient)) return new Response("not answered: our own address")
    const memo = `replied:${sender}`
    if ((await env.MEMORY.get(memo)) !== null) return new Response("not answered: answered this sender today")
    const reply = await env.MAILROOM.fetch(`/v1/emails/${event.email.id}/reply`, {
      method: "POST",
      // The event id makes a retried delivery send the same reply once.
      headers: { "content-type": "application/json", "idempotency-key": `auto-reply-${event.id}` },
      body: JSON.stringify({ text: env.REPLY_TEXT || DEFAULT_TEXT })
    })
    const answer = await reply.json().catch(() => ({}))
    if (!reply.ok) {
      const code = answer?.error?.code ?? reply.status
      // Mail that cannot be answered (rejected, no Message-ID, …) or a recipient the gate refuses: done.
      // The loop guard refusing the reply (loop_detected) is an answer too: never retried.
      if (code === "inbound_not_repliable" || code === "recipient_not_allowed" || code === "loop_detected") {
        return new Response(`not answered: ${code}`)
      }
      return new Response(`the reply failed: ${code}`, { status: 502 })
    }
    await env.MEMORY.put(memo, JSON.stringify(answer.data?.id ?? true), { expirationTtl: ONCE_PER_SECONDS })
    return Response.json({ replied_to: sender, sent_email_id: answer.data?.id ?? null })
  }
}
