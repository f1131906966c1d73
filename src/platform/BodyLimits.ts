/**
 * How large a request body each operation reads, and the 413 past it. A body declared larger is
 * refused before anything else runs; up to `DRAIN_MAX_BYTES` it is read and discarded first so the
 * connection stays usable.
 */
import { envelopeOf, PayloadTooLarge } from "../contract/Errors.js"
import { json } from "./PipelineResponse.js"

/** Largest request body the API reads. */
export const MAX_BODY_BYTES = 1024 * 1024
/** Deploying a function carries up to 1 MiB of module source, which JSON escaping can multiply. */
export const FUNCTIONS_MAX_BODY_BYTES = 8 * 1024 * 1024
/** Outgoing mail carries up to 10 MiB of attachments, base64-encoded in the JSON body. */
export const SEND_MAX_BODY_BYTES = 16 * 1024 * 1024
const SENDS = /^\/v1\/(send-mail|emails\/[^/]+\/reply)$/
/** The MCP endpoint carries what the operations its tools call carry (sends, function code). */
export const bodyLimitOf = (path: string) =>
  path.startsWith("/v1/functions") ? FUNCTIONS_MAX_BODY_BYTES : SENDS.test(path) || path === "/mcp" ? SEND_MAX_BODY_BYTES : MAX_BODY_BYTES

/**
 * A declared body past the limit is read and discarded up to this many bytes, then answered 413 on
 * a connection that stays usable; a larger one is answered at once and the connection closed.
 */
export const DRAIN_MAX_BYTES = 64 * 1024 * 1024

export const tooLarge = (limit: number, close: boolean) =>
  json(
    envelopeOf(
      new PayloadTooLarge({
        message: `body: larger than the ${limit} bytes this operation reads`,
        details: { limit_bytes: limit }
      })
    ),
    413,
    close ? { connection: "close" } : {}
  )
