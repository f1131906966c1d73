/** Functions named on the command line by id or by name, resolved to the id a request body or filter needs. */
import { Effect, Option } from "effect"
import { CliFailure } from "../Failure.js"
import type { Client } from "../Session.js"
import { fetchPages, pageParams } from "./common.js"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** A function given by id, or by name (looked up among the organization's functions). */
export const functionId = (client: Client, ref: string) =>
  Effect.gen(function*() {
    if (UUID.test(ref)) return ref
    const all = yield* fetchPages(
      { limit: Option.some(100), cursor: Option.none(), all: true },
      (cursor) => client.functions.list({ urlParams: pageParams(Option.some(100), cursor) })
    )
    const found = all.items.find((f) => f.name === ref)
    if (found === undefined) {
      return yield* new CliFailure({ message: `no function named "${ref}" (\`mailroom functions list\` shows them)`, usage: true })
    }
    return found.id
  })

/** The same for an optional flag. */
export const optionalFunctionId = (client: Client, ref: Option.Option<string>) =>
  Option.match(ref, {
    onNone: () => Effect.succeed(Option.none<string>()),
    onSome: (r) => Effect.map(functionId(client, r), Option.some)
  })
