/**
 * Server-rendered pages outside the `/v1` API (`/device`, `/claim`): plain HTML forms, no
 * JavaScript, every control a labelled form element.
 */
import { HttpServerRequest, HttpServerResponse, UrlParams } from "@effect/platform"
import { Effect } from "effect"
import { sha256Hex } from "../platform/Secrets.js"

export const escapeHtml = (s: string) =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;")

const STYLE = `body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem;color:#111}
h1{font-size:1.4rem}.code{font-family:monospace;font-size:2rem;letter-spacing:.2rem;margin:.5rem 0 1rem}
form{margin:1rem 0}label{display:block;margin:.5rem 0 .2rem}input,select{font-size:1rem;padding:.4rem;width:100%;box-sizing:border-box}
button{font-size:1rem;padding:.5rem 1rem;margin:.8rem .5rem 0 0}.error{color:#a00}.note{color:#555}`

export const page = (title: string, body: string, status = 200, headers: Record<string, string> = {}) =>
  HttpServerResponse.text(
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">` +
      `<title>${escapeHtml(title)} · Mailroom</title><style>${STYLE}</style></head><body><h1>${escapeHtml(title)}</h1>${body}</body></html>`,
    {
      status,
      contentType: "text/html; charset=utf-8",
      headers: {
        "cache-control": "no-store",
        "x-frame-options": "DENY",
        "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        // `no-referrer` would make Chromium send `Origin: null` on our own form posts.
        "referrer-policy": "same-origin",
        ...headers
      }
    }
  )

export const message = (kind: "error" | "note", text: string) => `<p class="${kind}" role="${kind === "error" ? "alert" : "status"}">${escapeHtml(text)}</p>`

export const hidden = (name: string, value: string) => `<input type="hidden" name="${name}" value="${escapeHtml(value)}">`

export const seeOther = (location: string, headers: Record<string, string> = {}) =>
  HttpServerResponse.empty({ status: 303, headers: { location, "cache-control": "no-store", ...headers } })

/** The submitted form fields (urlencoded), first value of each. */
export const formFields = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const params = yield* Effect.orElseSucceed(request.urlParamsBody, () => [] as UrlParams.UrlParams)
  const out: Record<string, string> = {}
  for (const [k, v] of params) if (!(k in out)) out[k] = v
  return out
})

export const queryParam = (request: HttpServerRequest.HttpServerRequest, name: string) =>
  new URL(request.url, "http://mailroom.invalid").searchParams.get(name) ?? ""

/** A cross-site form post carries another Origin; same-origin posts carry ours or none. */
export const sameOrigin = (request: HttpServerRequest.HttpServerRequest) => {
  const origin = request.headers["origin"]
  if (origin === undefined || origin === "null") return origin === undefined
  try {
    return new URL(origin).host === request.headers["host"]
  } catch {
    return false
  }
}

/** The CSRF token of a page session: derived from its cookie, which another site cannot read. */
export const csrfToken = (sessionToken: string) => sha256Hex(`csrf:${sessionToken}`)
