/**
 * daily-digest: remembers each verified `email.received` (sender, subject, time) under
 * `day:<YYYY-MM-DD>:<email id>` in MEMORY (a key per message: invocations running at once never
 * overwrite each other's notes, as a shared list read, appended to and written back would), and on a verified `wake.command` of type `digest` (the daily wake the
 * install created) mails everything collected since the last digest to `env.DIGEST_TO`, from the
 * organization's managed inbox, through `env.MAILROOM` (POST /v1/send-mail), then forgets it.
 */
const encoder = new TextEncoder()
const MAX_PER_DAY = 500

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

async function api(env, path, init) {
  const r = await env.MAILROOM.fetch(path, init)
  const body = await r.json().catch(() => ({}))
  if (!r.ok) throw new Error(`${init?.method ?? "GET"} ${path}: ${body?.error?.code ?? r.status}: ${body?.error?.message ?? ""}`)
  return body.data
}

async function remember(env, event) {
  const day = `day:${event.created_at.slice(0, 10)}:`
  const today = await env.MEMORY.list({ prefix: day, limit: MAX_PER_DAY })
  if (today.keys.length >= MAX_PER_DAY) return new Response("day is full")
  // A retried delivery of the same email writes the same key: noted once.
  await env.MEMORY.put(`${day}${event.email.id}`, JSON.stringify({ from: event.email.from, subject: event.email.subject, at: event.created_at }))
  return new Response("remembered")
}

async function digest(env, event) {
  const notes = []
  let cursor
  do {
    const page = await env.MEMORY.list({ prefix: "day:", cursor })
    notes.push(...page.keys.map((k) => k.name))
    cursor = page.list_complete ? undefined : page.cursor
  } while (cursor)
  const items = []
  for (const key of notes) {
    const item = await env.MEMORY.get(key, "json")
    if (item !== null && typeof item.at === "string") items.push(item)
  }
  items.sort((a, b) => a.at.localeCompare(b.at))
  const lines = items.map((item) => `${item.at.slice(0, 16).replace("T", " ")}  ${item.from}  ${item.subject}`)
  const account = await api(env, "/v1/account")
  const sent = await api(env, "/v1/send-mail", {
    method: "POST",
    // One digest per firing, however often the delivery is retried.
    headers: { "content-type": "application/json", "idempotency-key": `digest-${event.id}` },
    body: JSON.stringify({
      from: account.managed_inbox_address,
      to: env.DIGEST_TO,
      subject: lines.length === 0 ? "Digest: no new mail" : `Digest: ${lines.length} new message${lines.length === 1 ? "" : "s"}`,
      text: lines.length === 0 ? "No mail arrived since the last digest." : `Since the last digest:\n\n${lines.join("\n")}\n`
    })
  })
  for (const key of notes) await env.MEMORY.delete(key)
  return Response.json({ digest: sent.id, messages: lines.length })
}

export default {
  async fetch(request, env) {
    const body = await request.text()
    if (!(await verified(request.headers.get("mailroom-signature"), body, env.MAILROOM_WEBHOOK_SECRET))) {
      return new Response("the signature does not verify", { status: 401 })
    }
    const event = JSON.parse(body)
    if (event.event === "email.received") return remember(env, event)
    // Only a wake the service signed starts a digest, never a command someone mailed in.
    if (event.event === "wake.command" && event.wake?.type === "digest" && event.wake.verified === true) {
      return digest(env, event)
    }
    return new Response(`ignored ${event.event}`)
  }
}
