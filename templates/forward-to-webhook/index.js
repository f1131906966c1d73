/**
 * forward-to-webhook: re-posts each event whose Mailroom-Signature verifies to `env.TARGET_URL`,
 * byte for byte, with the signature and event headers, so the receiver can verify it with the
 * account's webhook secret exactly as a direct delivery. `TARGET_AUTHORIZATION`, when set, is sent
 * as the Authorization header. The target's failure is this function's failure (502), so the
 * delivery is retried on the usual schedule.
 */
const encoder = new TextEncoder()

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

/** Headers a receiver needs to verify and deduplicate the event, copied as they came. */
const FORWARDED = ["mailroom-signature", "legacy-signature", "mailroom-event-id", "mailroom-event-type", "mailroom-attempt"]

export default {
  async fetch(request, env) {
    const body = await request.text()
    const signature = request.headers.get("mailroom-signature")
    if (!(await verified(signature, body, env.MAILROOM_WEBHOOK_SECRET))) {
      return new Response("the signature does not verify", { status: 401 })
    }
    const headers = { "content-type": "application/json", "user-agent": "mailroom-forward-to-webhook/1.0" }
    for (const name of FORWARDED) {
      const value = request.headers.get(name)
      if (value !== null) headers[name] = value
    }
    if (env.TARGET_AUTHORIZATION) headers.authorization = env.TARGET_AUTHORIZATION
    let answer
    try {
      answer = await fetch(env.TARGET_URL, { method: "POST", headers, body, redirect: "manual" })
    } catch (e) {
      return new Response(`cannot reach the target: ${e.message}`, { status: 502 })
    }
    await answer.body?.cancel()
    if (answer.status < 200 || answer.status >= 300) {
      return new Response(`the target answered ${answer.status}`, { status: 502 })
    }
    return new Response(`forwarded (${answer.status})`)
  }
}
