/**
 * The headers of the last API response a command saw, for `Retry-After` in its error message. One
 * per command run (src/cli/Run.ts provides it): the clients record into it, the failure report reads it.
 */
import { Context, type Ref } from "effect"

export class LastResponse extends Context.Tag("mailroom/cli/LastResponse")<
  LastResponse,
  Ref.Ref<Readonly<Record<string, string>>>
>() {}
