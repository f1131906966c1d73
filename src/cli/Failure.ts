/** Failures of the CLI itself, each with the exit code it ends the process with. */
import { Data } from "effect"

export const ExitCode = { ok: 0, other: 1, usage: 2, api: 3, network: 4 } as const

/** A local problem (no credentials, unreadable file…): exit 1 unless `usage` says it was the invocation. */
export class CliFailure extends Data.TaggedError("CliFailure")<{ readonly message: string; readonly usage?: boolean }> {}
