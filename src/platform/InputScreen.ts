/**
 * Checks every request passes before any decoder or handler sees it, for input that no field schema
 * can be trusted to catch: U+0000 (PostgreSQL text and jsonb cannot hold it, so it failed deep in
 * SQL) in any query value, path segment, JSON string or key, or form field; and JSON nested deeper
 * than a sane document (a 100,000-deep array overflowed the stack while its error was formatted).
 */

export const NUL_REASON = "must not contain NUL characters"

/** Deepest JSON nesting of arrays and objects accepted in a request body. */
export const MAX_JSON_DEPTH = 64

export const DEPTH_REASON = `nested deeper than ${MAX_JSON_DEPTH} levels of arrays and objects`

/** Whether a JSON text opens more than `limit` arrays/objects at once; a linear scan, no parse. */
export const jsonDeeperThan = (text: string, limit: number): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // backslash: skip the escaped character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 91 || c === 123) {
      if (++depth > limit) return true
    } else if (c === 93 || c === 125) depth--
  }
  return false
}

const shown = (name: string) => name.replace(/\u0000/g, "\\u0000")

const join = (path: string, key: string | number) =>
  typeof key === "number" ? `${path}[${key}]` : path === "" ? shown(key) : `${path}.${shown(key)}`

/** Where the first U+0000 of a parsed JSON value is: `""` for the value itself, else a field path. */
const nulIn = (value: unknown, path: string): string | undefined => {
  if (typeof value === "string") return value.includes("\u0000") ? path : undefined
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = nulIn(value[i], join(path, i))
      if (found !== undefined) return found
    }
    return undefined
  }
  if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      if (k.includes("\u0000")) return path
      const found = nulIn(v, join(path, k))
      if (found !== undefined) return found
    }
  }
  return undefined
}

/**
 * The field holding a U+0000 in a JSON text (`body` for the top level), or undefined. Only a text
 * with the `\u0000` escape is parsed (a raw NUL is not valid JSON: the decoder refuses it anyway).
 */
export const nulInJson = (text: string): string | undefined => {
  if (!/\\u0000/i.test(text)) return undefined
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return undefined
  }
  const found = nulIn(value, "")
  return found === undefined ? undefined : found === "" ? "body" : found
}

/** The first name (or the name of the value) of `a=b&c=d` pairs that holds U+0000 once decoded. */
export const nulInParams = (encoded: string): string | undefined => {
  if (!/%00|\u0000/.test(encoded)) return undefined
  for (const [k, v] of new URLSearchParams(encoded)) {
    if (k.includes("\u0000") || v.includes("\u0000")) return shown(k)
  }
  return undefined
}

/** Index of the first path segment holding U+0000 once percent-decoded. */
export const nulSegment = (path: string): number | undefined => {
  if (!/%00|\u0000/.test(path)) return undefined
  const segments = path.split("/")
  for (let i = 0; i < segments.length; i++) {
    let decoded: string
    try {
      decoded = decodeURIComponent(segments[i] ?? "")
    } catch {
      decoded = segments[i] ?? ""
    }
    if (decoded.includes("\u0000")) return i
  }
  return undefined
}

const mediaType = (contentType: string | undefined) => (contentType ?? "").split(";")[0]!.trim().toLowerCase()

export const isJsonMediaType = (contentType: string | undefined) => {
  const type = mediaType(contentType)
  return type === "application/json" || (type.startsWith("application/") && type.endsWith("+json"))
}

export const isFormMediaType = (contentType: string | undefined) =>
  mediaType(contentType) === "application/x-www-form-urlencoded"
