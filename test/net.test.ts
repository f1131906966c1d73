/**
 * Shared primitives over a service with WEBHOOK_ALLOW_PRIVATE_URLS=false and a test DNS server:
 * webhook signing (vectors checked with openssl), the SSRF guard (a table of addresses and names),
 * sender and route patterns, and endpoint URL checks through the API.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import { execFileSync } from "node:child_process"
import { Provisioning } from "../src/identity/Provisioning.js"
import { matchesSender, parsePattern } from "../src/mail/SenderPatterns.js"
import { evaluateFilters, evaluateRules } from "../src/filters/Evaluate.js"
import { Dns } from "../src/net/Dns.js"
import { checkUrl, classifyAddress, parseIp } from "../src/net/Ssrf.js"
import { compareSpecificity, matchesRoute, parseRoutePattern } from "../src/routes/Patterns.js"
import { parseHeader, sign, signatureHeaders, verify } from "../src/webhooks/Signing.js"
import { buildEmailEvent, truncateUtf8 } from "../src/webhooks/Payload.js"
import { TestDns, testServiceWithDns } from "./support/dns.js"
import { call } from "./support/http.js"

/** HMAC-SHA256 computed by openssl in a child process: an implementation independent of ours. */
const opensslHmac = (key: string, message: string) => {
  const out = execFileSync("openssl", ["dgst", "-sha256", "-hmac", key], { input: Buffer.from(message, "utf8") }).toString()
  return out.trim().split("= ")[1]!
}

const Env = Provisioning.Default.pipe(Layer.provideMerge(testServiceWithDns({ WEBHOOK_ALLOW_PRIVATE_URLS: "false" })))

const newOrg = (plan: "agent" | "developer" | "pro" = "developer") =>
  Effect.gen(function*() {
    const p = yield* Provisioning
    const org = yield* p.createOrganization({ name: "Net", plan })
    const key = yield* p.issueApiKey(org.id)
    return { orgId: org.id, token: key.apiKey }
  })

layer(Env, { timeout: 120_000, excludeTestServices: true })("net", (it) => {
  describe("webhook signing", () => {
    it("matches openssl on fixed vectors; the secret is used as UTF-8, never base64-decoded", () => {
      const vectors: Array<[string, string, number]> = [
        ["whsec_c2VjcmV0LWJ1dC1ub3QtYmFzZTY0", "{\"id\":\"evt_1\",\"event\":\"email.received\"}", 1_700_000_000],
        ["plain secret with spaces", "", 0],
        ["ünïcødé-κλειδί", "{\"subject\":\"héllo ✉\"}", 1_763_700_000],
        ["YWJj", "abc", 42] // base64 of "abc": must be used as the 4 characters Y W J j
      ]
      for (const [secret, body, t] of vectors) {
        const expected = opensslHmac(secret, `${t}.${body}`)
        expect(sign(secret, body, t)).toBe(`t=${t},v1=${expected}`)
        expect(sign(secret, Buffer.from(body, "utf8"), t)).toBe(`t=${t},v1=${expected}`)
      }
      expect(sign("YWJj", "abc", 42)).not.toBe(`t=42,v1=${opensslHmac("abc", "42.abc")}`)
      // A well-known constant: HMAC-SHA256("key", "1.The quick brown fox jumps over the lazy dog").
      expect(sign("key", "The quick brown fox jumps over the lazy dog", 1).split("v1=")[1]).toBe(
        opensslHmac("key", "1.The quick brown fox jumps over the lazy dog")
      )
      const headers = signatureHeaders("s", "b", 5)
      expect(headers["Mailroom-Signature"]).toBe(headers["Legacy-Signature"])
    })

    it("verifies within 300 s either way and rejects tampering, other secrets and malformed headers", () => {
      const body = "{\"a\":1}"
      const t = 1_700_000_000
      const header = sign("s3cret", body, t)
      expect(verify("s3cret", body, header, t)).toEqual({ ok: true, t })
      expect(verify("s3cret", body, header, t + 300).ok).toBe(true)
      expect(verify("s3cret", body, header, t - 300).ok).toBe(true)
      expect(verify("s3cret", body, header, t + 301)).toEqual({ ok: false, reason: "timestamp_out_of_tolerance" })
      expect(verify("s3cret", body, header, t - 301)).toEqual({ ok: false, reason: "timestamp_out_of_tolerance" })
      expect(verify("s3cret", "{\"a\":2}", header, t)).toEqual({ ok: false, reason: "signature_mismatch" })
      expect(verify("other", body, header, t)).toEqual({ ok: false, reason: "signature_mismatch" })
      expect(verify("s3cret", body, header.replace(`t=${t}`, `t=${t + 1}`), t)).toEqual({ ok: false, reason: "signature_mismatch" })
      for (const bad of ["", "t=1", "v1=abc", `t=x,v1=${"0".repeat(64)}`, `t=${t},v1=zz`]) {
        expect(verify("s3cret", body, bad, t)).toEqual({ ok: false, reason: "malformed" })
      }
      // During a rotation a header may carry several v1 values; one valid is enough.
      const both = `${header},v1=${"a".repeat(64)}`
      expect(parseHeader(both)?.v1.length).toBe(2)
      expect(verify("s3cret", body, both, t).ok).toBe(true)
    })
  })

  describe("email event payload", () => {
    it("cuts text and html at 256 KiB on a character boundary and flags content_truncated", () => {
      const big = "é".repeat(200_000) // 400,000 bytes
      const cut = truncateUtf8(big, 256 * 1024)
      expect(cut.truncated).toBe(true)
      expect(Buffer.byteLength(cut.value)).toBeLessThanOrEqual(256 * 1024)
      expect(cut.value.endsWith("é")).toBe(true)
      const base = {
        id: "00000000-0000-4000-8000-000000000001", thread_id: "00000000-0000-7000-8000-000000000001", inbox_id: null, message_id: "<m@x>", from: "a@b.c", to: ["x@y.z"],
        recipient: "x@y.z", subject: "s", date: null, in_reply_to: null, references: [], extracted_text: null, headers: {}, size_bytes: 1,
        spam_score: null, auth: { spf: "pass", dkim: "none", dmarc: "none" }, auto_submitted: false,
        trust: { sender_authenticated: false, sender_known: false, registry_verified: false, auto_submitted: false, signals: [] }, attachments: [], raw_url: "r", attachments_url: "a"
      }
      const e = buildEmailEvent({ eventId: "evt_x", event: "email.received", createdAt: new Date(0), email: { ...base, text: big, html: null } })
      expect(e.email.content_truncated).toBe(true)
      expect(Object.keys(e)).toEqual(["id", "event", "created_at", "email"])
      const small = buildEmailEvent({ eventId: "evt_y", event: "email.received", createdAt: new Date(0), email: { ...base, text: "hi", html: "<b>hi</b>" } })
      expect(small.email.content_truncated).toBe(false)
      expect(small.created_at).toBe("1970-01-01T00:00:00.000Z")
    })
  })

  describe("SSRF guard", () => {
    const blocked: Array<[string, string]> = [
      ["127.0.0.1", "loopback"], ["127.255.255.254", "loopback"], ["0.0.0.0", "this-network"],
      ["10.0.0.1", "private"], ["10.255.255.255", "private"], ["172.16.0.1", "private"], ["172.31.255.255", "private"],
      ["192.168.1.1", "private"], ["169.254.0.1", "link-local"], ["169.254.169.254", "metadata"],
      ["100.64.0.1", "carrier-grade-nat"], ["100.127.255.254", "carrier-grade-nat"], ["100.100.100.200", "metadata"],
      ["224.0.0.1", "multicast"], ["255.255.255.255", "reserved"], ["192.0.2.10", "documentation"],
      ["198.18.0.1", "benchmarking"],
      // Other spellings of 127.0.0.1 and 169.254.169.254
      ["2130706433", "loopback"], ["0x7f000001", "loopback"], ["0x7f.0.0.1", "loopback"], ["0177.0.0.1", "loopback"],
      ["127.1", "loopback"], ["017700000001", "loopback"], ["2852039166", "metadata"], ["0xa9fea9fe", "metadata"],
      ["0xA9.0xFE.0xA9.0xFE", "metadata"], ["3232235777", "private"],
      // IPv6
      ["::1", "loopback"], ["[::1]", "loopback"], ["::", "unspecified"], ["0:0:0:0:0:0:0:1", "loopback"],
      ["fc00::1", "unique-local"], ["fd12:3456:789a::1", "unique-local"], ["fd00:ec2::254", "unique-local"],
      ["fe80::1", "link-local"], ["fe80::1%eth0", "link-local"], ["ff02::1", "multicast"], ["2001:db8::1", "documentation"],
      // IPv4 inside IPv6
      ["::ffff:127.0.0.1", "loopback"], ["::ffff:7f00:1", "loopback"], ["::ffff:169.254.169.254", "metadata"],
      ["::ffff:10.0.0.1", "private"], ["::ffff:a9fe:a9fe", "metadata"], ["::127.0.0.1", "loopback"],
      ["64:ff9b::10.0.0.1", "private"], ["2002:7f00:1::", "loopback"], ["2002:c0a8:101::1", "private"],
      // SIIT IPv4-translated ::ffff:0:0:0/96, and the local-use NAT64 prefix whatever it embeds
      ["::ffff:0:127.0.0.1", "loopback"], ["::ffff:0:7f00:1", "loopback"], ["::ffff:0:a9fe:a9fe", "metadata"],
      ["0:0:0:0:ffff:0:a00:1", "private"], ["64:ff9b:1::7f00:1", "nat64-local"], ["64:ff9b:1:7f00:1::", "nat64-local"],
      ["64:ff9b:1::8.8.8.8", "nat64-local"], ["64:ff9b:0:0:0:1:808:808", "nat64-local"],
      // The rest of the IANA special-purpose registries
      ["3fff::1", "documentation"], ["3fff:fff:ffff::1", "documentation"], ["5f00::1", "segment-routing"],
      ["5f00:ffff::1", "segment-routing"], ["2001:20::1", "ietf-protocol-assignments"],
      ["2001:2f:ffff::1", "ietf-protocol-assignments"], ["2001:2::1", "ietf-protocol-assignments"],
      ["2001:2:0:ffff::1", "ietf-protocol-assignments"], ["2001:1::1", "ietf-protocol-assignments"],
      ["2001:3::1", "ietf-protocol-assignments"], ["2001:4:112::1", "ietf-protocol-assignments"],
      ["2001:10::1", "ietf-protocol-assignments"], ["2001:30::1", "ietf-protocol-assignments"],
      ["2001:1ff:ffff::1", "ietf-protocol-assignments"], ["2620:4f:8000::1", "as112"], ["100::1", "discard"],
      ["100:0:0:1::1", "discard"], ["4000::1", "reserved"], ["8000::1", "reserved"], ["1::1", "reserved"],
      ["192.31.196.1", "as112"], ["192.52.193.1", "amt"], ["192.175.48.1", "as112"], ["::ffff:192.175.48.6", "as112"]
    ]
    const allowed = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "172.32.0.1", "100.128.0.1", "192.169.0.1", "11.0.0.1",
      "2606:4700:4700::1111", "2a00:1450:4001:82b::200e", "::ffff:8.8.8.8", "134744072" /* 8.8.8.8 */, "0x08080808",
      "::ffff:0:8.8.8.8", "64:ff9b::8.8.8.8", "2001:200::1", "2001:4860:4860::8888", "3ffe:ffff::1", "3fff:1000::1", "2620:4f:8001::1",
      "192.31.197.1", "192.175.49.1"]

    it(`classifies ${blocked.length} non-public addresses by range and accepts public ones`, () => {
      expect(blocked.length).toBeGreaterThanOrEqual(30)
      for (const [address, range] of blocked) {
        const ip = parseIp(address)
        expect(ip, address).toBeDefined()
        expect([address, classifyAddress(ip!.address)]).toEqual([address, { public: false, range }])
      }
      for (const address of allowed) {
        const ip = parseIp(address)
        expect(ip, address).toBeDefined()
        expect([address, classifyAddress(ip!.address)]).toEqual([address, { public: true }])
      }
      for (const name of ["example.com", "1.example", "0x7f.example", "localhost"]) expect(parseIp(name)).toBeUndefined()
    })

    it.effect("checkUrl rejects URLs whose literal or resolved addresses are not public, in every spelling", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        dns.zone.set("loop.test", { A: ["127.0.0.1"] })
        dns.zone.set("meta.test", { A: ["169.254.169.254"] })
        dns.zone.set("cgnat.test", { A: ["100.64.1.2"] })
        dns.zone.set("private10.test", { A: ["10.1.2.3"] })
        dns.zone.set("ula.test", { AAAA: ["fd00::5"] })
        dns.zone.set("ll6.test", { AAAA: ["fe80::2"] })
        dns.zone.set("loop6.test", { AAAA: ["::1"] })
        dns.zone.set("mapped.test", { AAAA: ["::ffff:127.0.0.1"] })
        dns.zone.set("mixed.test", { A: ["93.184.216.34", "192.168.0.10"] })
        dns.zone.set("public.test", { A: ["93.184.216.34"], AAAA: ["2606:4700:4700::1111"] })
        dns.zone.set("empty.test", {})
        const check = (url: string) =>
          Effect.either(checkUrl(url, { allowPrivate: false })).pipe(Effect.provide(Dns.Default))
        const rejected = [
          "https://127.0.0.1/hook", "https://2130706433/hook", "https://0x7f000001/hook", "https://0177.0.0.1/",
          "https://127.1/", "https://[::1]/", "https://[::ffff:127.0.0.1]/", "https://[::ffff:a9fe:a9fe]/",
          "https://169.254.169.254/latest/meta-data", "https://[fd00:ec2::254]/", "https://[fe80::1]/",
          "https://10.0.0.1/", "https://100.64.0.1/", "https://localhost/", "https://api.localhost/",
          "https://loop.test/", "https://meta.test/", "https://cgnat.test/", "https://private10.test/",
          "https://ula.test/", "https://ll6.test/", "https://loop6.test/", "https://mapped.test/", "https://mixed.test/",
          "https://empty.test/", "https://nxdomain.test/", "http://public.test/", "ftp://public.test/",
          "https://user:pw@public.test/", "not a url"
        ]
        expect(rejected.length).toBeGreaterThanOrEqual(30)
        for (const url of rejected) {
          const r = yield* check(url)
          expect([url, Either.isLeft(r)]).toEqual([url, true])
        }
        const meta = yield* check("https://meta.test/")
        expect(Either.isLeft(meta) && meta.left.reason).toContain("resolves to a metadata address")
        const ok = yield* check("https://public.test:8443/x?y=1")
        expect(Either.isRight(ok)).toBe(true)
        if (Either.isRight(ok)) {
          expect(ok.right.addresses.map((a) => a.address).sort()).toEqual(["2606:4700:4700:0:0:0:0:1111", "93.184.216.34"])
          expect(ok.right.port).toBe(8443)
          expect(ok.right.hostname).toBe("public.test")
        }
        expect(Either.isRight(yield* check("https://93.184.216.34/"))).toBe(true)
        expect(Either.isRight(yield* check("https://[2606:4700:4700::1111]/"))).toBe(true)
        // With private URLs allowed (development), http and loopback pass and resolve.
        const dev = yield* Effect.either(checkUrl("http://loop.test:8080/", { allowPrivate: true })).pipe(Effect.provide(Dns.Default))
        expect(Either.isRight(dev) && dev.right.addresses).toEqual([{ address: "127.0.0.1", family: 4 }])
      }))

    it.effect("endpoint create and update reject non-https and private URLs with validation_error on url", () =>
      Effect.gen(function*() {
        const dns = yield* TestDns
        dns.zone.set("hooks.public.test", { A: ["93.184.216.34"] })
        dns.zone.set("internal.public.test", { A: ["10.0.0.7"] })
        const { token } = yield* newOrg()
        dns.zone.set("orchid.public.test", { AAAA: ["2001:20::7"] })
        dns.zone.set("srv6.public.test", { AAAA: ["2606:4700::1", "5f00:1::1"] })
        for (const url of ["http://hooks.public.test/x", "https://127.0.0.1/x", "https://internal.public.test/x",
          "https://[::ffff:169.254.169.254]/", "https://2130706433/",
          // IPv6 special-purpose ranges, as literals and as what a name resolves to
          "https://[3fff::1]/", "https://[5f00::1]/", "https://[2001:20::1]/", "https://[2001:2::1]/",
          "https://[2001:3::1]/", "https://[100:0:0:1::1]/", "https://orchid.public.test/", "https://srv6.public.test/"]) {
          const r = yield* call("POST", "/v1/endpoints", { token, body: { url } })
          expect([url, r.status, r.body.error.code]).toEqual([url, 400, "validation_error"])
          expect(r.body.error.message).toMatch(/^url: /)
        }
        const created = yield* call("POST", "/v1/endpoints", { token, body: { url: "https://hooks.public.test/x" } })
        expect(created.status).toBe(201)
        expect(created.body.data.url).toBe("https://hooks.public.test/x")
        const patched = yield* call("PATCH", `/v1/endpoints/${created.body.data.id}`, {
          token,
          body: { url: "https://internal.public.test/x" }
        })
        expect(patched.status).toBe(400)
        expect(patched.body.error.message).toMatch(/^url: must be publicly reachable/)
      }))
  })

  describe("patterns", () => {
    it("sender patterns: exact address, @domain and *.domain", () => {
      expect(parsePattern("  Alice@Acme.COM ")).toEqual({ kind: "address", address: "alice@acme.com" })
      expect(parsePattern("@acme.com")).toEqual({ kind: "domain", domain: "acme.com" })
      expect(parsePattern("*.acme.com")).toEqual({ kind: "subdomains", domain: "acme.com" })
      for (const bad of ["", "acme", "@", "*.", "*@acme.com", "a@b", "@-bad-.com", "x".repeat(501)]) {
        expect([bad, parsePattern(bad)]).toEqual([bad, undefined])
      }
      expect(matchesSender("alice@acme.com", "ALICE@acme.com")).toBe(true)
      expect(matchesSender("alice@acme.com", "bob@acme.com")).toBe(false)
      expect(matchesSender("@acme.com", "bob@acme.com")).toBe(true)
      expect(matchesSender("@acme.com", "bob@mail.acme.com")).toBe(false)
      expect(matchesSender("*.acme.com", "bob@mail.acme.com")).toBe(true)
      expect(matchesSender("*.acme.com", "bob@a.b.acme.com")).toBe(true)
      expect(matchesSender("*.acme.com", "bob@acme.com")).toBe(false)
      expect(matchesSender("*.acme.com", "bob@evilacme.com")).toBe(false)
    })

    it("route patterns: exact before wildcard, most specific wildcard first", () => {
      const p = (s: string) => parseRoutePattern(s)!
      expect(matchesRoute(p("support@acme.com"), "Support@ACME.com")).toBe(true)
      expect(matchesRoute(p("*@acme.com"), "anyone@acme.com")).toBe(true)
      expect(matchesRoute(p("*@acme.com"), "anyone@other.com")).toBe(false)
      expect(matchesRoute(p("*+tag@acme.com"), "bob+tag@acme.com")).toBe(true)
      expect(matchesRoute(p("*+tag@acme.com"), "bob+other@acme.com")).toBe(false)
      expect(matchesRoute(p("a.b@acme.com"), "axb@acme.com")).toBe(false)
      const sorted = ["*@acme.com", "*+tag@acme.com", "bob+tag@acme.com", "b*+tag@acme.com"].map(p).sort(compareSpecificity)
      expect(sorted.map((x) => x.pattern)).toEqual(["bob+tag@acme.com", "b*+tag@acme.com", "*+tag@acme.com", "*@acme.com"])
      expect(parseRoutePattern("no-at-sign")).toBeUndefined()
      expect(parseRoutePattern("a@*.acme.com")).toBeUndefined()
    })

    it("filters: whitelist match admits, blocklist refuses, whitelists exclude everyone else", () => {
      expect(evaluateFilters([], "a@x.com")).toEqual({ allowed: true, reason: "no_filters" })
      const block = [{ type: "blocklist" as const, pattern: "@spam.example" }]
      expect(evaluateFilters(block, "bot@spam.example")).toEqual({ allowed: false, reason: "blocklisted", pattern: "@spam.example" })
      expect(evaluateFilters(block, "friend@ok.example")).toEqual({ allowed: true, reason: "not_blocked" })
      const mixed = [...block, { type: "whitelist" as const, pattern: "ceo@spam.example" }]
      expect(evaluateFilters(mixed, "CEO@spam.example").allowed).toBe(true)
      expect(evaluateFilters(mixed, "friend@ok.example")).toEqual({ allowed: false, reason: "not_whitelisted" })
    })

    it("endpoint rules are ANDed; {} delivers everything; event_types match exactly", () => {
      const m = { sender: "A@x.com", sizeBytes: 5000, attachmentBytes: 2 * 1024 * 1024, attachmentCount: 1, eventType: "email.received" }
      expect(evaluateRules({}, m)).toEqual({ deliver: true })
      expect(evaluateRules({ max_size_bytes: 4999 }, m)).toEqual({ deliver: false, rule: "max_size_bytes" })
      expect(evaluateRules({ max_size_bytes: 5000 }, m)).toEqual({ deliver: true })
      expect(evaluateRules({ exclude_attachments: true }, m)).toEqual({ deliver: false, rule: "exclude_attachments" })
      expect(evaluateRules({ attachment_limit_mb: 1.5 }, m)).toEqual({ deliver: false, rule: "attachment_limit_mb" })
      expect(evaluateRules({ attachment_limit_mb: 2 }, m)).toEqual({ deliver: true })
      expect(evaluateRules({ sender_whitelist: ["a@x.com"] }, m)).toEqual({ deliver: true })
      expect(evaluateRules({ sender_whitelist: ["b@x.com"] }, m)).toEqual({ deliver: false, rule: "sender_whitelist" })
      expect(evaluateRules({ sender_blacklist: ["a@X.com"] }, m)).toEqual({ deliver: false, rule: "sender_blacklist" })
      expect(evaluateRules({ event_types: ["email.bounced"] }, m)).toEqual({ deliver: false, rule: "event_types" })
      expect(evaluateRules({ event_types: ["email.received", "x"], sender_whitelist: ["a@x.com"] }, m)).toEqual({ deliver: true })
    })
  })
})
