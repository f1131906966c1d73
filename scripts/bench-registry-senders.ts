/**
 * What registry-verified senders cost the ingest path.
 *
 * 1. The lookup alone (in-process, `RegistryDirectory.verifiedSenders`) with 100,000 published
 *    entries in 1,000 registries: p50/p99 of one lookup at a time (hits and misses), and lookups/s
 *    with 64 at once (they share batched queries).
 * 2. The service as `npm start` runs it, with a test DNS server publishing SPF and DMARC for one
 *    sender domain: end-of-DATA → 250 p50/p99 for mail whose From passes DMARC and is a published
 *    entry (so the lookup runs and the payload carries `sender`), next to mail from a domain with no
 *    records (no lookup), sent alternately over one connection to an organization with a webhook.
 *
 *   [DATABASE_URL=postgres://postgres@127.0.0.1:5432/test] npx tsx scripts/bench-registry-senders.ts [--entries 100000] [--messages 400]
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { createServer } from "node:http"
import { RegistryDirectory } from "../src/registries/Directory.js"
import { testConfigLayer } from "../test/support/harness.js"
import { startDnsServer } from "../test/support/dns.js"
import { arg, benchDatabase, message, percentile, provision, RawSmtp, scratch, startService } from "./bench-support.js"

const ENTRIES = arg("entries", 100_000)
const MESSAGES = arg("messages", 400)
const PER_REGISTRY = 100

const ms = (xs: Array<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return `p50 ${percentile(s, 0.5).toFixed(3)} ms, p99 ${percentile(s, 0.99).toFixed(3)} ms`
}

/** Runs `effect` over the scratch database (migrated), then closes it. */
const withDatabase = <A>(env: Record<string, string>, effect: Effect.Effect<A, unknown, SqlClient.SqlClient | RegistryDirectory>) =>
  Effect.runPromise(effect.pipe(
    Effect.provide(RegistryDirectory.Default.pipe(Layer.provideMerge(benchDatabase()), Layer.provide(testConfigLayer(env)))),
    Effect.scoped
  ))

/** `count` published entries of one organization, addressed `<inbox>+<i>` (a +tag form it can send from). */
const seedEntries = (orgId: string, inbox: string, count: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [local, domain] = inbox.split("@") as [string, string]
    yield* sql`INSERT INTO registries (org_id, name, publish_policy)
      SELECT ${orgId}, 'bench-' || r, 'open' FROM generate_series(1, ${Math.ceil(count / PER_REGISTRY)}) r`
    yield* sql`INSERT INTO registry_entries (registry_id, org_id, handle, address, status)
      SELECT r.id, ${orgId}, 'agent-' || g, ${local} || '+' || g || '@' || ${domain}, 'published'
        FROM generate_series(1, ${count}) g
        JOIN registries r ON r.name = 'bench-' || (((g - 1) / ${PER_REGISTRY}) + 1)`
    yield* sql`ANALYZE registry_entries`
  })

const lookupFigures = async () => {
  const db = await scratch("regsenders")
  try {
    const [org] = await provision(db.env, 1)
    const [local, domain] = org!.address.split("@") as [string, string]
    const hit = () => `${local}+${1 + Math.floor(Math.random() * ENTRIES)}@${domain}`
    const miss = () => `nobody-${Math.random().toString(36).slice(2)}@${domain}`
    return await withDatabase(db.env, Effect.gen(function*() {
      yield* seedEntries(org!.id, org!.address, ENTRIES)
      const directory = yield* RegistryDirectory
      const time = (address: string) =>
        Effect.gen(function*() {
          const t0 = performance.now()
          const found = yield* directory.verifiedSenders(address)
          return [performance.now() - t0, found.length] as const
        })
      for (let i = 0; i < 200; i++) yield* time(hit())
      const hits: Array<number> = []
      const misses: Array<number> = []
      for (let i = 0; i < 2000; i++) {
        const [t, n] = yield* time(hit())
        if (n !== 1) throw new Error("a published entry was not found")
        hits.push(t)
        misses.push((yield* time(miss()))[0])
      }
      const total = 20_000
      const t0 = performance.now()
      yield* Effect.forEach(Array.from({ length: total }, (_, i) => (i % 2 === 0 ? hit() : miss())), (a) => directory.verifiedSenders(a), {
        concurrency: 64,
        discard: true
      })
      const perSecond = total / ((performance.now() - t0) / 1000)
      return { hits: ms(hits), misses: ms(misses), perSecond }
    }))
  } finally {
    await db.cleanup()
  }
}

const ingestFigures = () =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const dns = yield* startDnsServer
    const senderDomain = "bench-sender.test"
    dns.zone.set(senderDomain, { TXT: ["v=spf1 ip4:127.0.0.1 -all"] })
    dns.zone.set(`_dmarc.${senderDomain}`, { TXT: ["v=DMARC1; p=reject"] })
    const db = yield* Effect.acquireRelease(Effect.promise(() => scratch("regingest")), (s) => Effect.promise(() => s.cleanup()))
    const env = { ...db.env, DNS_SERVER: `127.0.0.1:${dns.port}` }
    const [publisher, receiver] = yield* Effect.promise(() => provision(env, 2))
    let withSender = 0
    let delivered = 0
    const hooks = yield* Effect.acquireRelease(
      Effect.async<ReturnType<typeof createServer>>((resume) => {
        const server = createServer((req, res) => {
          let body = ""
          req.on("data", (c: Buffer) => (body += c.toString("utf8")))
          req.on("end", () => {
            delivered++
            if ((JSON.parse(body) as { email: { sender?: unknown } }).email.sender !== undefined) withSender++
            res.writeHead(200).end("ok")
          })
        })
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
      }),
      (server) => Effect.sync(() => server.close())
    )
    const hookPort = (hooks.address() as { port: number }).port
    yield* Effect.promise(() =>
      withDatabase(env, Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO domains (org_id, domain, verification_token, verified_at)
          VALUES (${publisher!.id}, ${senderDomain}, 'bench', now())`
        yield* sql`INSERT INTO endpoints (org_id, kind, url) VALUES (${receiver!.id}, 'http', ${`http://127.0.0.1:${hookPort}/hook`})`
        yield* seedEntries(publisher!.id, publisher!.address, 10_000)
        const [registry] = yield* sql<{ id: string }>`SELECT id FROM registries WHERE name = 'bench-1'`
        yield* sql`INSERT INTO registry_entries (registry_id, org_id, handle, address, status)
          VALUES (${registry!.id}, ${publisher!.id}, 'agent', ${`agent@${senderDomain}`}, 'published')`
      }))
    )
    const service = yield* Effect.acquireRelease(Effect.promise(() => startService(env)), (s) => Effect.promise(() => s.stop()))
    const smtp = yield* Effect.acquireRelease(Effect.promise(() => RawSmtp.open(service.smtpPort)), (c) => Effect.sync(() => c.close()))
    const verified = `agent@${senderDomain}`
    const plain = "someone@bench-plain.test"
    const send = (i: number, from: string) => Effect.promise(() => smtp.send(from, receiver!.address, message(i, from, receiver!.address, 2048)))
    for (let i = 0; i < 50; i++) yield* send(i, i % 2 === 0 ? verified : plain)
    const times = { verified: [] as Array<number>, plain: [] as Array<number> }
    for (let i = 0; i < MESSAGES; i++) {
      const kind = i % 2 === 0 ? "verified" : "plain"
      const [code, t] = yield* send(1000 + i, kind === "verified" ? verified : plain)
      if (code !== 250) throw new Error(`SMTP ${code}`)
      times[kind].push(t)
    }
    const until = Date.now() + 30_000
    while (delivered < MESSAGES + 50 && Date.now() < until) yield* Effect.sleep("100 millis")
    return { verified: ms(times.verified), plain: ms(times.plain), delivered, withSender }
  })))

const main = async () => {
  const lookups = await lookupFigures()
  console.log(`lookup with ${ENTRIES} published entries (${process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"}):`)
  console.log(`  one at a time, hit:  ${lookups.hits}`)
  console.log(`  one at a time, miss: ${lookups.misses}`)
  console.log(`  64 at once: ${Math.round(lookups.perSecond)} lookups/s`)
  const ingest = await ingestFigures()
  console.log(`SMTP end-of-DATA → 250, ${MESSAGES / 2} messages each, alternating on one connection:`)
  console.log(`  From a published entry, DMARC pass (lookup runs): ${ingest.verified}`)
  console.log(`  From an unauthenticated domain (no lookup):       ${ingest.plain}`)
  console.log(`  delivered ${ingest.delivered}, of which ${ingest.withSender} carried email.sender`)
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
