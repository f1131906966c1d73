/**
 * Per-request state shared between the serving pipeline (outermost) and the API middleware
 * (innermost). They run on the same fiber, so fiber refs carry it without threading services.
 */
import { FiberRef, Option } from "effect"
import type { Principal } from "../contract/Security.js"

/** Correlates a response with its log lines; also sent back as `x-request-id`. */
export const RequestId = FiberRef.unsafeMake<string>("")

/**
 * The bearer credential as resolved once by the pipeline (for rate limiting and idempotency
 * scope). `None`: not resolved here; `Some(None)`: presented but invalid.
 */
export const ResolvedPrincipal = FiberRef.unsafeMake<Option.Option<Option.Option<Principal>>>(Option.none())
