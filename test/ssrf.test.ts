/**
 * SSRF vectors end to end: every URL of the table goes through the same steps a delivery takes
 * (`checkUrl`, then `postJson` to the checked address if it passed) while loopback listeners on the
 * vectors' port count connections; none may arrive. A DNS-rebinding server alternates a public
 * answer and 127.0.0.1: the check refuses the loopback answers, and a passed check pins the
 * connection to the address it checked (the sender never resolves the name again).
 */
import { describe, expect, layer } from "@effect/vitest"
import dnsPacket from "dns-packet"
import { Effect, Either, Layer } from "effect"
import { createSocket } from "node:dgram"
import { createServer, type Server } from "node:net"
import { Dns } from "../src/net/Dns.js"
import { checkUrl, classifyAddress } from "../src/net/Ssrf.js"
import { postJson } from "../src/webhooks/Sender.js"
import { testConfigLayer } from "./support/harness.js"

type Answer = { A?: Array<string>; AAAA?: Array<string> }

/** A DNS server whose answers come from a function of the name and how often it was asked. */
const startDns = (answer: (name: string, type: string, n: number) => Answer | undefined) =>
  Effect.acquireRelease(
    Effect.async<{ port: number; close: () => void }>((resume) => {
      const asked = new Map<string, number>()
      const socket = createSocket("udp4")
      socket.on("message", (msg, rinfo) => {
        let q: dnsPacket.Packet
        try {
          q = dnsPacket.decode(msg)
        } catch {
          return
        }
        const question = q.questions?.[0]
        if (question === undefined) return
        const name = question.name.toLowerCase().replace(/\.$/, "")
        const key = `${question.type} ${name}`
        const n = asked.get(key) ?? 0
        asked.set(key, n + 1)
        const entry = answer(name, question.type, n)
        const answers: Array<dnsPacket.Answer> = []
        if (entry !== undefined && question.type === "A") for (const a of entry.A ?? []) answers.push({ type: "A", name: question.name, ttl: 0, data: a })
        if (entry !== undefined && question.type === "AAAA") for (const a of entry.AAAA ?? []) answers.push({ type: "AAAA", name: question.name, ttl: 0, data: a })
        socket.send(dnsPacket.encode({
          id: q.id,
          type: "response",
          flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | (entry === undefined ? 3 : 0),
          questions: q.questions,
          answers
        }), rinfo.port, rinfo.address)
      })
      socket.bind(0, "127.0.0.1", () => resume(Effect.succeed({ port: socket.address().port, close: () => socket.close() })))
    }),
    (s) => Effect.sync(() => s.close())
  )

/** Listeners that count every connection attempt to `port` on 127.0.0.1 and ::1. */
const startTrap = Effect.acquireRelease(
  Effect.promise(async () => {
    const hits: Array<string> = []
    const listen = (host: string, port: number) =>
      new Promise<Server | undefined>((resolve) => {
        const s = createServer((socket) => {
          hits.push(`${host} from ${socket.remoteAddress}`)
          socket.destroy()
        })
        s.once("error", () => resolve(undefined))
        s.listen(port, host, () => resolve(s))
      })
    const v4 = (await listen("127.0.0.1", 0))!
    const a = v4.address()
    const port = typeof a === "object" && a !== null ? a.port : 0
    const v6 = await listen("::1", port)
    return { port, hits, servers: [v4, v6].filter((s): s is Server => s !== undefined) }
  }),
  (t) => Effect.sync(() => t.servers.forEach((s) => s.close()))
)

const PUBLIC = "93.184.216.34"

const dnsLayer = Layer.unwrapScoped(Effect.gen(function*() {
  const dns = yield* startDns((name, type, n) => {
    const zone: Record<string, Answer> = {
      "loop.test": { A: ["127.0.0.1"] },
      "loop6.test": { AAAA: ["::1"] },
      "mapped.test": { AAAA: ["::ffff:127.0.0.1"] },
      "zero.test": { A: ["0.0.0.0"] },
      "mixed.test": { A: [PUBLIC, "127.0.0.1"] },
      "mixed6.test": { A: [PUBLIC], AAAA: ["::1"] },
      "loopfirst.test": { A: ["127.0.0.1", PUBLIC] },
      "meta.test": { A: ["169.254.169.254"] },
      "private.test": { A: ["192.168.1.20"] },
      "cgnat.test": { A: ["100.64.0.9"] },
      "ula.test": { AAAA: ["fd00::1"] },
      "nat64.test": { AAAA: ["64:ff9b::7f00:1"] },
      "sixtofour.test": { AAAA: ["2002:7f00:1::1"] },
      "siit.test": { AAAA: ["::ffff:0:7f00:1"] },
      "public.test": { A: [PUBLIC] },
      "empty.test": {}
    }
    // Rebinding: the first answer is public, every later one loopback (and back, alternating).
    if (name === "rebind.test") return type === "A" ? { A: [n % 2 === 0 ? PUBLIC : "127.0.0.1"] } : {}
    if (name === "rebind6.test") return type === "AAAA" ? { AAAA: [n % 2 === 0 ? "2606:4700:4700::1111" : "::1"] } : {}
    return zone[name]
  })
  return Dns.Default.pipe(Layer.provide(testConfigLayer({ DNS_SERVER: `127.0.0.1:${dns.port}` })))
}))

const attempt = (url: string, trapPort: number) =>
  Effect.gen(function*() {
    const checked = yield* Effect.either(checkUrl(url, { allowPrivate: false }))
    if (Either.isLeft(checked)) return { url, refused: checked.left.reason }
    // Only a checked, public address is ever connected to; none of these vectors should get here.
    const publicOnly = checked.right.addresses.every((a) => classifyAddress(a.address).public)
    if (publicOnly) return { url, refused: null, addresses: checked.right.addresses.map((a) => a.address) }
    yield* postJson({ target: checked.right, body: "{}", headers: {}, timeoutMs: 300, maxResponseBytes: 16 })
    return { url, refused: null, trapPort }
  })

layer(dnsLayer, { timeout: 60_000, excludeTestServices: true })("ssrf", (it) => {
  describe("vectors", () => {
    it.scoped("every forbidden URL is refused and the loopback listeners see no connection", () =>
      Effect.gen(function*() {
        const trap = yield* startTrap
        const P = trap.port
        const vectors = [
          // 127.0.0.1 in every spelling the URL parser accepts
          `https://127.0.0.1:${P}/`, `https://2130706433:${P}/`, `https://0x7f000001:${P}/`, `https://0x7f.0.0.1:${P}/`,
          `https://0177.0.0.1:${P}/`, `https://127.1:${P}/`, `https://127.0.1:${P}/`, `https://017700000001:${P}/`,
          `https://0x7f.1:${P}/`, `https://127.000.000.001:${P}/`, `https://%31%32%37.0.0.1:${P}/`,
          `https://\uff11\uff12\uff17.\uff10.\uff10.\uff11:${P}/`, `https://127.0.0.1.:${P}/`, `https://127.255.255.254:${P}/`,
          `https://0:${P}/`, `https://0.0.0.0:${P}/`, `https://0x0:${P}/`,
          // IPv6 loopback and IPv4 embedded in IPv6
          `https://[::1]:${P}/`, `https://[0:0:0:0:0:0:0:1]:${P}/`, `https://[0000::1]:${P}/`, `https://[::]:${P}/`,
          `https://[::ffff:127.0.0.1]:${P}/`, `https://[::ffff:7f00:1]:${P}/`, `https://[::127.0.0.1]:${P}/`,
          `https://[64:ff9b::127.0.0.1]:${P}/`, `https://[2002:7f00:1::]:${P}/`, `https://[::ffff:0.0.0.0]:${P}/`,
          `https://[::ffff:0:127.0.0.1]:${P}/`, `https://[::ffff:0:7f00:1]:${P}/`, `https://[64:ff9b:1::7f00:1]:${P}/`,
          // port 0, on a public literal and a public name
          `https://8.8.8.8:0/`, `https://public.test:0/`, `https://${PUBLIC}:0/`, `https://siit.test:${P}/`,
          // names
          `https://localhost:${P}/`, `https://LOCALHOST:${P}/`, `https://localhost.:${P}/`, `https://api.localhost:${P}/`,
          `https://a.b.localhost:${P}/`, `https://loop.test:${P}/`, `https://loop6.test:${P}/`, `https://mapped.test:${P}/`,
          `https://zero.test:${P}/`, `https://mixed.test:${P}/`, `https://mixed6.test:${P}/`, `https://loopfirst.test:${P}/`,
          `https://nat64.test:${P}/`, `https://sixtofour.test:${P}/`, `https://LOOP.TEST:${P}/`, `https://loop.test.:${P}/`,
          // other non-public ranges
          `https://169.254.169.254/latest/meta-data/`, `https://[fd00:ec2::254]/`, `https://100.100.100.200/`,
          `https://meta.test/`, `https://10.0.0.1:${P}/`, `https://172.16.0.1/`, `https://192.168.0.1/`, `https://private.test/`,
          `https://100.64.0.1/`, `https://cgnat.test/`, `https://[fc00::1]/`, `https://ula.test/`, `https://[fe80::1]/`,
          `https://224.0.0.1/`, `https://255.255.255.255/`, `https://192.0.2.1/`, `https://198.18.0.1/`, `https://[ff02::1]/`,
          `https://[2001:db8::1]/`,
          // schemes, credentials, unresolvable
          `http://127.0.0.1:${P}/`, `http://example.com:${P}/`, `ftp://127.0.0.1:${P}/`, `file:///etc/passwd`,
          `gopher://127.0.0.1:${P}/_`, `ws://127.0.0.1:${P}/`, `javascript:alert(1)`, `data:text/plain,x`,
          `https://user:pass@127.0.0.1:${P}/`, `https://evil.example@127.0.0.1:${P}/`, `https://user@loop.test:${P}/`,
          `https://empty.test:${P}/`, `https://nxdomain.test:${P}/`, `//127.0.0.1:${P}/`, `127.0.0.1:${P}`, ``
        ]
        expect(vectors.length).toBeGreaterThanOrEqual(60)
        const results = yield* Effect.forEach(vectors, (url) => attempt(url, P))
        const passed = results.filter((r) => r.refused === null)
        expect(passed).toEqual([])
        // Each refusal says why.
        for (const r of results) expect(typeof r.refused === "string" && r.refused.length > 0, r.url).toBe(true)
        expect(trap.hits).toEqual([])
        console.log(`ssrf: ${vectors.length} vectors refused, ${trap.hits.length} loopback connections`)
      }))

    it.scoped("DNS rebinding: loopback answers are refused, public answers are pinned, nothing reaches loopback", () =>
      Effect.gen(function*() {
        const trap = yield* startTrap
        const P = trap.port
        let refused = 0
        let passed = 0
        for (let i = 0; i < 20; i++) {
          for (const host of ["rebind.test", "rebind6.test"]) {
            const r = yield* attempt(`https://${host}:${P}/hook`, P)
            if (r.refused !== null) {
              refused++
              expect(r.refused).toContain("loopback")
            } else {
              passed++
              // A pass carries only the public address it checked: the sender connects there and nowhere else.
              expect(r.addresses!.every((a) => classifyAddress(a).public)).toBe(true)
            }
          }
        }
        expect(refused).toBeGreaterThanOrEqual(10)
        expect(passed).toBeGreaterThanOrEqual(10)
        expect(trap.hits).toEqual([])
      }))

    it.scoped("the sender connects to the checked address only: it never resolves the host name again", () =>
      Effect.gen(function*() {
        // An allowed listener stands in for the checked public address; the name itself resolves nowhere.
        const allowed = yield* startTrap
        const result = yield* postJson({
          target: {
            url: new URL(`http://rebind.invalid:${allowed.port}/hook`),
            hostname: "rebind.invalid",
            port: allowed.port,
            addresses: [{ address: "127.0.0.1", family: 4 }]
          },
          body: "{}",
          headers: {},
          timeoutMs: 1000,
          maxResponseBytes: 16
        })
        expect(allowed.hits.length).toBe(1)
        expect(allowed.hits[0]).toContain("127.0.0.1")
        expect(result.errorCode).toBe("connection_error")
      }))
  })
})
