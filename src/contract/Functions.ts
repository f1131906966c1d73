/**
 * How a path names a hosted function: its id or its name. In the floor because two areas take it:
 * the functions themselves and their memories (which live under the function's path).
 */
import { Schema } from "effect"
import { allErrors } from "./Envelope.js"

const UUID_SHAPE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** Whether a function reference is an id (else it is a name). */
export const isFunctionId = (ref: string) => UUID_SHAPE.test(ref)

/**
 * A function in a path: its id or its name. A UUID is always taken as an id (so a function whose
 * name looks like a UUID is reached by its id).
 */
export const FunctionRef = Schema.String.pipe(
  Schema.filter((s) => UUID_SHAPE.test(s) || /^[a-z0-9-]{1,64}$/.test(s), {
    message: () => "must be a function's id (UUID) or its name (1-64 of a-z, 0-9 and -)"
  })
).annotations({ description: "the function's id or its name" })

export const FunctionPath = allErrors(Schema.Struct({ id: FunctionRef }))
