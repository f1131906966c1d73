/**
 * remember-senders: for each sender of inbound mail, the function's memory holds
 * `sender:<address>` = {count, first_at, last_at, last_subject}. Read them with
 * `mailroom memories list --function <id> --prefix sender:` or `env.MEMORY` in another handler.
 */
const encoder = new TextEncoder()

/** Mailroom-Signature `t=<unix>,v1=<hex>[,v1=<hex>]`: HMAC-SHA256 of `<t>.<body>` with the webhook secret. */
async function verified(header, body, secret) {
  const t = /(?:^|,)t=(\d+)/.exec(header ?? "")?.[1]
  if (!t || !secret || Math.abs(Date.now() / 1000 - Number(t)) > 300) return false
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"])
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(`${t}.${body}`)))
  const expected = Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("")
  // Any v1 may match: for a day after a rotation the header carries the new and the previous signature.
  return header.split(",").some((part) => part.startsWith("v1=") && sameText(part.slice(3), expected))
}

function sameText(a, b) {
  if (a.length !== b.length) return false
  let diff = 0
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i)
  return diff === 0
}

/** `Ann <ann@example.com>` or `ann@example.com` → `ann@example.com`. */
function addressOf(from) {
  const m = /<([^<>]+)>\s*$/.exec(from ?? "")
  return (m ? m[1] : from ?? "").trim().toLowerCase()
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
    if (sender === "") return new Response("no sender address")
    const key = `sender:${sender}`
    const seen = (await env.MEMORY.get(key, "json")) ?? { count: 0, first_at: event.created_at }
    const next = {
      count: seen.count + 1,
      first_at: seen.first_at,
      last_at: event.created_at,
      last_subject: event.email.subject
    }
    await env.MEMORY.put(key, JSON.stringify(next))
    return Response.json({ sender, count: next.count })
  }
}
