/**
 * The port through which the send path asks whether a send is held for approval (the account's
 * `send_approval`). Holding is the drafts area's work, which sits above sending because approving a
 * draft sends it: drafts implement the port (src/drafts/SendApproval.ts) and the composition root
 * (src/Server.ts) wires it.
 */
import { Context, type Effect, type Option } from "effect"
import type { Draft } from "../contract/Drafts.js"
import type { Principal } from "../contract/Security.js"
import type { ApprovalSetting, SendInput } from "./Sender.js"

export class SendApproval extends Context.Tag("mailroom/SendApproval")<SendApproval, {
  /**
   * The draft the send is held as; none when it goes out now. `setting` is the account's
   * `send_approval` when the caller read it already (with the rest of the send's state).
   */
  readonly hold: (principal: Principal, input: SendInput, setting?: ApprovalSetting) => Effect.Effect<Option.Option<Draft>>
}>() {}
