/**
 * A DNS server for tests: UDP on 127.0.0.1 (random port), answering from a zone the test edits.
 * Unknown names are NXDOMAIN; known names without records of the asked type answer empty.
 */
import dnsPacket from "dns-packet"
import { Context, Effect, Layer } from "effect"
import { createSocket } from "node:dgram"
import { testService } from "./harness.js"

export interface ZoneEntry {
  A?: Array<string>
  AAAA?: Array<string>
  /** A record longer than 255 characters is given as its character strings (a DKIM key). */
  TXT?: Array<string | Array<string>>
  MX?: Array<{ exchange: string; priority: number }>
  /** Answer SERVFAIL for this name (a broken authoritative server). */
  SERVFAIL?: boolean
}

export interface TestDnsShape {
  readonly port: number
  readonly zone: Map<string, ZoneEntry>
  /** Names asked, for assertions. */
  readonly queries: Array<string>
}

export class TestDns extends Context.Tag("test/TestDns")<TestDns, TestDnsShape>() {}

export const startDnsServer = Effect.acquireRelease(
  Effect.async<{ port: number; zone: Map<string, ZoneEntry>; queries: Array<string>; close: () => void }>((resume) => {
    // Public names the tests use as ordinary webhook hosts.
    const zone = new Map<string, ZoneEntry>([
      ["example.com", { A: ["93.184.216.34"] }],
      ["example.org", { A: ["93.184.215.14"] }]
    ])
    const queries: Array<string> = []
    const socket = createSocket("udp4")
    socket.on("message", (msg, rinfo) => {
      let query: dnsPacket.Packet
      try {
        query = dnsPacket.decode(msg)
      } catch {
        return
      }
      const question = query.questions?.[0]
      if (question === undefined) return
      const name = question.name.toLowerCase().replace(/\.$/, "")
      queries.push(`${question.type} ${name}`)
      const entry = zone.get(name)
      const answers: Array<dnsPacket.Answer> = []
      if (entry !== undefined) {
        if (question.type === "A") for (const a of entry.A ?? []) answers.push({ type: "A", name: question.name, ttl: 1, data: a })
        if (question.type === "AAAA") for (const a of entry.AAAA ?? []) answers.push({ type: "AAAA", name: question.name, ttl: 1, data: a })
        if (question.type === "TXT") for (const t of entry.TXT ?? []) answers.push({ type: "TXT", name: question.name, ttl: 1, data: t })
        if (question.type === "MX") {
          for (const m of entry.MX ?? []) answers.push({ type: "MX", name: question.name, ttl: 1, data: { preference: m.priority, exchange: m.exchange } })
        }
      }
      const response = dnsPacket.encode({
        id: query.id,
        type: "response",
        flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | (entry === undefined ? 3 : entry.SERVFAIL === true ? 2 : 0),
        questions: query.questions,
        answers
      })
      socket.send(response, rinfo.port, rinfo.address)
    })
    socket.bind(0, "127.0.0.1", () => {
      const port = socket.address().port
      resume(Effect.succeed({ port, zone, queries, close: () => socket.close() }))
    })
  }),
  (s) => Effect.sync(() => s.close())
)

/** A test service (see harness) whose DNS_SERVER is a fresh test DNS server, plus that server. */
export const testServiceWithDns = (overrides: Record<string, string> = {}) =>
  Layer.unwrapScoped(Effect.map(startDnsServer, (dns) =>
    testService({ ...overrides, DNS_SERVER: `127.0.0.1:${dns.port}` }).pipe(
      Layer.merge(Layer.succeed(TestDns, { port: dns.port, zone: dns.zone, queries: dns.queries }))
    )))

/** SPF designating 127.0.0.1, where the tests' SMTP clients connect from. */
export const SPF_LOCALHOST = "v=spf1 ip4:127.0.0.1 -all"

/**
 * A fresh domain publishing SPF_LOCALHOST and no DMARC record: mail a test sends from it (envelope
 * and From) passes SPF aligned with its From, so its sender becomes known to the receiving
 * organization (the first-send gate). Unauthenticated mail never does.
 */
export const authenticatedDomain = (label: string) =>
  Effect.map(TestDns, (dns) => {
    const domain = `${label}-${Math.random().toString(36).slice(2, 8)}.test`
    dns.zone.set(domain, { TXT: [SPF_LOCALHOST] })
    return domain
  })
