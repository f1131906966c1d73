/**
 * `/docs` works offline and fast: nothing in the page points at another host, the page and its
 * script are compressed by `Accept-Encoding` (and decompress to the same bytes), carry an `ETag`
 * and answer 304 to `If-None-Match`.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { brotliDecompressSync, gunzipSync } from "node:zlib"
import { TestServer, testService } from "./support/harness.js"

interface Raw {
  readonly status: number
  readonly headers: Headers
  readonly bytes: Buffer
}

/** undici's fetch decodes bodies on its own; node:http shows the bytes as sent. */
const get = (path: string, headers: Record<string, string> = {}) =>
  Effect.flatMap(TestServer, (server) =>
    Effect.promise(async () => {
      const { request } = await import("node:http")
      return await new Promise<Raw>((resolve, reject) => {
        const req = request(`${server.baseUrl}${path}`, { headers }, (res) => {
          const chunks: Array<Buffer> = []
          res.on("data", (c: Buffer) => chunks.push(c))
          res.on("end", () => {
            const h = new Headers()
            for (const [k, v] of Object.entries(res.headers)) if (typeof v === "string") h.set(k, v)
            resolve({ status: res.statusCode ?? 0, headers: h, bytes: Buffer.concat(chunks) })
          })
        })
        req.on("error", reject)
        req.end()
      })
    }))

layer(testService(), { timeout: 120_000, excludeTestServices: true })("/docs", (it) => {
  describe("the reference page", () => {
    it.effect("names no other host: no fonts, CDN or script from outside; a CSP holds the browser to it", () =>
      Effect.gen(function*() {
        const server = yield* TestServer
        const page = yield* get("/docs")
        expect(page.status).toBe(200)
        expect(page.headers.get("content-type")).toContain("text/html")
        const html = page.bytes.toString("utf8")
        const urls = html.match(/https?:\/\/[^\s"'<>)\\]+/g) ?? []
        const foreign = urls.filter((u) => new URL(u).origin !== server.baseUrl)
        expect(foreign).toEqual([])
        expect(html).not.toMatch(/fonts\.|cdn\.|jsdelivr|unpkg/i)
        const script = /<script src="([^"]+)"/.exec(html)?.[1] ?? ""
        expect(script).toMatch(/^\/docs\/scalar\.js\?v=/)
        // The viewer is told not to load its web fonts nor send telemetry.
        expect(html).toContain("&quot;withDefaultFonts&quot;:false")
        expect(html).toContain("&quot;telemetry&quot;:false")
        const csp = page.headers.get("content-security-policy") ?? ""
        expect(csp).toContain("default-src 'self'")
        expect(csp).toContain("font-src 'self' data:")
        expect(csp).toContain(`connect-src 'self' ${server.baseUrl}`)
        expect(csp).not.toMatch(/script-src[^;]*https?:/)

        const js = yield* get(script)
        expect(js.status).toBe(200)
        expect(js.headers.get("content-type")).toContain("javascript")
        expect(js.bytes.length).toBeGreaterThan(1_000_000)
        expect(js.headers.get("cache-control")).toContain("immutable")
      }))

    it.effect("is compressed by Accept-Encoding, with an ETag and 304 on If-None-Match", () =>
      Effect.gen(function*() {
        for (const path of ["/docs", (/<script src="([^"]+)"/.exec((yield* get("/docs")).bytes.toString("utf8"))?.[1] ?? "")]) {
          const plain = yield* get(path)
          expect(plain.headers.get("content-encoding")).toBeNull()
          const etag = plain.headers.get("etag") ?? ""
          expect(etag).toMatch(/^"[\w-]+"$/)

          const br = yield* get(path, { "accept-encoding": "gzip, deflate, br" })
          expect(br.headers.get("content-encoding")).toBe("br")
          expect(br.headers.get("vary")).toBe("Accept-Encoding")
          expect(br.bytes.length).toBeLessThan(plain.bytes.length / 3)
          expect(brotliDecompressSync(br.bytes).equals(plain.bytes)).toBe(true)

          const gz = yield* get(path, { "accept-encoding": "gzip" })
          expect(gz.headers.get("content-encoding")).toBe("gzip")
          expect(gz.bytes.length).toBeLessThan(plain.bytes.length / 3)
          expect(gunzipSync(gz.bytes).equals(plain.bytes)).toBe(true)

          const refused = yield* get(path, { "accept-encoding": "br;q=0, gzip;q=0" })
          expect(refused.headers.get("content-encoding")).toBeNull()

          for (const tag of [etag, br.headers.get("etag") ?? "", gz.headers.get("etag") ?? "", `W/${etag}`, "*"]) {
            const again = yield* get(path, { "accept-encoding": "br", "if-none-match": tag })
            expect(again.status, tag).toBe(304)
            expect(again.bytes.length).toBe(0)
            expect(again.headers.get("etag")).toBe(br.headers.get("etag"))
          }
          const changed = yield* get(path, { "if-none-match": "\"something-else\"" })
          expect(changed.status).toBe(200)
        }
      }))
  })
})
