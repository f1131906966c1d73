/**
 * The API reference at `/docs`, served by the service alone: a small page holding the OpenAPI
 * document and the Scalar viewer's script at `/docs/scalar.js` (the bundle @effect/platform ships).
 * Nothing is fetched from another host (no web fonts, no CDN, no telemetry; a Content-Security-Policy
 * says so to the browser), both are sent gzip- or brotli-compressed by `Accept-Encoding`, and both
 * carry an `ETag` so a revisit costs a 304.
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { promisify } from "node:util"
import { brotliCompress, constants, gzip } from "node:zlib"

/** Scalar's standalone bundle as @effect/platform inlines it into its own `/docs` page. */
export const scalarBundle = (): string => {
  const require = createRequire(import.meta.url)
  const entry = require.resolve("@effect/platform/HttpApiScalar")
  const mod: unknown = require(join(dirname(entry), "internal", "httpApiScalar.js"))
  if (typeof mod === "object" && mod !== null && "javascript" in mod && typeof mod.javascript === "string") {
    return mod.javascript
  }
  throw new Error("@effect/platform no longer ships the Scalar bundle at internal/httpApiScalar.js")
}

const escapeHtml = (s: string) =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;")

/** JSON inside a `<script>` element: `<` and the JavaScript line terminators escaped. */
const scriptJson = (value: unknown) =>
  JSON.stringify(value).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029")

const scalarConfig = {
  _integration: "html",
  // Scalar's default fonts come from its own font host; the system's fonts are used instead.
  withDefaultFonts: false,
  customCss: ":root{--scalar-font:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;" +
    "--scalar-font-code:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}",
  telemetry: false
}

const etagOf = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("base64url").slice(0, 27)

export const docsPage = (spec: { readonly info: { readonly title: string } }, scriptPath: string) =>
  `<!doctype html>
<html>
  <head>
    <meta charset="utf-8" />
    <title>${escapeHtml(spec.info.title)}</title>
    <meta name="viewport" content="width=device-width, initial-scale=1" />
  </head>
  <body>
    <script id="api-reference" type="application/json" data-configuration="${escapeHtml(JSON.stringify(scalarConfig))}">
      ${scriptJson(spec)}
    </script>
    <script src="${escapeHtml(scriptPath)}"></script>
  </body>
</html>
`

type Coding = "br" | "gzip"

/** The content coding to answer with: brotli, else gzip, else none, as `Accept-Encoding` allows. */
export const chooseCoding = (acceptEncoding: string | undefined): Coding | undefined => {
  const q = new Map<string, number>()
  for (const part of (acceptEncoding ?? "").split(",")) {
    const [name, ...params] = part.trim().toLowerCase().split(";")
    if (name === undefined || name === "") continue
    const weight = params.map((p) => p.trim()).find((p) => p.startsWith("q="))
    q.set(name, weight === undefined ? 1 : Number(weight.slice(2)) || 0)
  }
  const accepts = (c: string) => (q.get(c) ?? q.get("*") ?? 0) > 0
  return accepts("br") ? "br" : accepts("gzip") ? "gzip" : undefined
}

const brotli = promisify(brotliCompress)
const gzipped = promisify(gzip)

/**
 * One static representation set. The compressed forms are made once, on first demand, off the event
 * loop (brotli quality 5: a quarter of the size in half a second; 11 took over 20 s for the bundle).
 */
export const staticAsset = (body: string, contentType: string, extraHeaders: Readonly<Record<string, string>>) => {
  const bytes = new TextEncoder().encode(body)
  const tag = etagOf(bytes)
  const encoded = new Map<Coding, Promise<Uint8Array>>()
  const compressed = (coding: Coding) => {
    let p = encoded.get(coding)
    if (p === undefined) {
      p = coding === "br"
        ? brotli(bytes, {
          params: { [constants.BROTLI_PARAM_QUALITY]: 5, [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length }
        })
        : gzipped(bytes, { level: 6 })
      encoded.set(coding, p)
    }
    return p
  }
  const etag = (coding: Coding | undefined) => `"${tag}${coding === undefined ? "" : `-${coding}`}"`
  /** Any representation of this content matches: they differ only in their coding. */
  const matches = (ifNoneMatch: string) =>
    ifNoneMatch.trim() === "*" ||
    ifNoneMatch.split(",").some((t) => t.trim().replace(/^W\//, "").replace(/^"|"$/g, "").replace(/-(br|gzip)$/, "") === tag)

  const respond = Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const coding = chooseCoding(request.headers["accept-encoding"])
    const headers: Record<string, string> = {
      ...extraHeaders,
      etag: etag(coding),
      vary: "Accept-Encoding",
      "x-content-type-options": "nosniff"
    }
    const ifNoneMatch = request.headers["if-none-match"]
    if (ifNoneMatch !== undefined && matches(ifNoneMatch)) return HttpServerResponse.empty({ status: 304, headers })
    if (coding === undefined) return HttpServerResponse.uint8Array(bytes, { contentType, headers })
    const body = yield* Effect.promise(() => compressed(coding))
    return HttpServerResponse.uint8Array(body, { contentType, headers: { ...headers, "content-encoding": coding } })
  })
  return { respond, tag }
}

/** What the reference page may load: only this service (and its public origin, for "try it"). */
export const docsContentSecurityPolicy = (publicOrigin: string) =>
  [
    "default-src 'self'",
    "script-src 'self' 'unsafe-eval'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self' data:",
    `connect-src 'self' ${publicOrigin}`,
    "worker-src 'self' blob:",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'"
  ].join("; ")
