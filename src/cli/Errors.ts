/**
 * How a failed command ends: the message on stderr (or a JSON error object with `--json`) and the
 * exit code (docs/cli.md). API errors are recognised by their tag from the typed client, so the
 * code shown is the contract's, with `details.remediation`, `gates[].fix` and `Retry-After`.
 */
import { Cause, Console, Effect, Option, ParseResult, Predicate, Ref } from "effect"
import { type ApiError, ErrorTable, type ErrorTag } from "../contract/Errors.js"
import { CliFailure, ExitCode } from "./Failure.js"
import { LastResponse } from "./LastResponse.js"

const isApiError = (e: unknown): e is ApiError =>
  Predicate.hasProperty(e, "_tag") && typeof e._tag === "string" && Object.hasOwn(ErrorTable, e._tag)

const isHttpClientError = (e: unknown): e is { _tag: "RequestError" | "ResponseError"; message: string; reason: string } =>
  Predicate.hasProperty(e, "_tag") && (e._tag === "RequestError" || e._tag === "ResponseError") &&
  Predicate.hasProperty(e, "reason")

interface Report {
  readonly exitCode: number
  readonly lines: ReadonlyArray<string>
  readonly json: Record<string, unknown>
}

/** A request field and the flag that sets it: `is_route_target` → `--route-target`. */
export type FieldNames = ReadonlyArray<readonly [field: string, flag: string]>

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/**
 * API messages name request fields; people typed flags, so the message names the flag. A field
 * with an underscore is replaced wherever it appears; a plain word only as a message's subject
 * (`url: must use https`), where it cannot be ordinary prose.
 */
const toFlags = (text: string, fields: FieldNames) =>
  fields.reduce((t, [field, flag]) => {
    const subject = field.includes("_") ? "" : "(?=:)"
    return t.replace(new RegExp(`(?<![\\w-])${escape(field)}(?![\\w-])${subject}`, "g"), flag)
  }, text)

const apiReport = (e: ApiError, fields: FieldNames, headers: Readonly<Record<string, string>>): Report => {
  const code = ErrorTable[e._tag as ErrorTag].code
  const lines = [`error: ${code}: ${toFlags(e.message, fields)}`]
  const json: Record<string, unknown> = { code, message: e.message }
  const remediation = e.details?.remediation
  if (remediation !== undefined) {
    lines.push(`remediation: ${toFlags(typeof remediation === "string" ? remediation : JSON.stringify(remediation), fields)}`)
  }
  const hint = e.details?.hint
  if (typeof hint === "string") lines.push(`hint: ${hint}`)
  if (e.details !== undefined) json.details = e.details
  for (const gate of e.gates ?? []) {
    // One line per refused subject (a recipient, for the send gates), its fix and where it is explained.
    const fix = gate.fix ? `; fix: ${gate.fix.action} ${gate.fix.subject}` : ""
    lines.push(`gate ${gate.name}: ${gate.subject}: ${gate.message}${fix}${gate.docs_url ? ` (${gate.docs_url})` : ""}`)
  }
  if (e.gates !== undefined) json.gates = e.gates
  const retryAfter = headers["retry-after"]
  if (retryAfter !== undefined) {
    lines.push(`retry after: ${retryAfter} s`)
    json.retry_after = Number(retryAfter)
  }
  return { exitCode: ExitCode.api, lines, json }
}

/** The report of a failure; `headers`: the last response's, for `Retry-After`. */
export const reportOf = (
  error: unknown,
  apiBase: string,
  fields: FieldNames = [],
  headers: Readonly<Record<string, string>> = {}
): Report => {
  if (isApiError(error)) return apiReport(error, fields, headers)
  if (error instanceof CliFailure) {
    return {
      exitCode: error.usage ? ExitCode.usage : ExitCode.other,
      lines: [`error: ${error.message}`],
      json: { code: error.usage ? "usage_error" : "cli_error", message: error.message }
    }
  }
  if (ParseResult.isParseError(error)) {
    // The typed client validates what it sends by encoding it against the contract first.
    const message = `invalid input: ${error.message}`
    return { exitCode: ExitCode.usage, lines: [`error: ${message}`], json: { code: "usage_error", message } }
  }
  if (isHttpClientError(error)) {
    if (error._tag === "RequestError" && error.reason === "Transport") {
      const message = `cannot reach ${apiBase}: ${error.message}`
      return { exitCode: ExitCode.network, lines: [`error: ${message}`], json: { code: "network_error", message } }
    }
    if (error._tag === "RequestError") {
      // InvalidUrl or Encode: the request could not even be built from what was given.
      const message = `cannot send the request: ${error.message}`
      return { exitCode: ExitCode.usage, lines: [`error: ${message}`], json: { code: "usage_error", message } }
    }
    const message = `unexpected response from ${apiBase}: ${error.message}`
    return { exitCode: ExitCode.other, lines: [`error: ${message}`], json: { code: "unexpected_response", message } }
  }
  const message = error instanceof Error ? error.message : String(error)
  return { exitCode: ExitCode.other, lines: [`error: ${message}`], json: { code: "cli_error", message } }
}

/** Prints the failure and returns the exit code. */
export const reportFailure = (cause: Cause.Cause<unknown>, json: boolean, apiBase: string, fields: FieldNames = []) =>
  Effect.gen(function*() {
    const failure = Cause.failureOption(cause)
    const error = Option.getOrElse(failure, () => Cause.squash(cause))
    const headers = yield* Effect.flatMap(LastResponse, Ref.get)
    const report = reportOf(error, apiBase, fields, headers)
    if (json) yield* Console.error(JSON.stringify({ error: report.json }))
    else yield* Console.error(report.lines.join("\n"))
    if (Option.isNone(failure) && process.env.MAILROOM_DEBUG) yield* Console.error(Cause.pretty(cause))
    return report.exitCode
  })
