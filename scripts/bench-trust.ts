/**
 * Cost of the trust signal rules (src/mail/Signals.ts) per 10 KB message, parse excluded (ingestion
 * parses anyway). Two corpora from test/fixtures/trust: "typical", each fixture padded to about
 * 10 KB with ordinary prose (and paragraphs, for HTML); "dense", each fixture repeated to 10 KB, so
 * its trigger words, links and styles recur every few hundred bytes (a worst case). CPU time, not
 * wall time, so other processes on a shared machine do not count. Target: at most 0.2 ms for typical.
 * `npx tsx scripts/bench-trust.ts`
 */
import { readdirSync, readFileSync } from "node:fs"
import { parseEmail, type ParsedEmail } from "../src/mail/Parse.js"
import { trustSignals } from "../src/mail/Signals.js"

const dir = new URL("../test/fixtures/trust/", import.meta.url)
const TARGET = 10 * 1024
const PROSE = "The quarterly figures came in slightly above plan, and the team would like to review the shipping " +
  "schedule with you next week. Please let us know which afternoon suits you; we can also send the summary " +
  "in advance so that everyone has time to read it before the call. "

const contentSize = (p: ParsedEmail) => (p.text?.length ?? 0) + (p.html?.length ?? 0)
const padded = (p: ParsedEmail): ParsedEmail => {
  const parts = (p.text !== null ? 1 : 0) + (p.html !== null ? 1 : 0)
  const missing = Math.max(0, TARGET - contentSize(p))
  const times = Math.ceil(missing / Math.max(1, parts) / PROSE.length)
  return {
    ...p,
    text: p.text === null ? null : p.text + "\n\n" + PROSE.repeat(times),
    html: p.html === null ? null : p.html + `<p>${PROSE}</p>`.repeat(times)
  }
}
const repeated = (p: ParsedEmail): ParsedEmail => {
  const times = Math.max(1, Math.round(TARGET / Math.max(1, contentSize(p))))
  return { ...p, text: p.text === null ? null : p.text.repeat(times), html: p.html === null ? null : p.html.repeat(times) }
}

const fixtures: Array<ParsedEmail> = []
for (const kind of ["benign", "hostile"]) {
  for (const f of readdirSync(new URL(`${kind}/`, dir))) fixtures.push(await parseEmail(readFileSync(new URL(`${kind}/${f}`, dir))))
}

const measure = (name: string, messages: ReadonlyArray<ParsedEmail>) => {
  const size = messages.reduce((n, m) => n + contentSize(m), 0) / messages.length
  for (let i = 0; i < 100; i++) for (const m of messages) trustSignals(m) // warm-up
  const rounds = 200
  const before = process.cpuUsage()
  for (let i = 0; i < rounds; i++) for (const m of messages) trustSignals(m)
  const used = process.cpuUsage(before)
  const ms = (used.user + used.system) / 1000 / (rounds * messages.length)
  const per10k = ms * (TARGET / size)
  console.log(`${name}: ${messages.length} messages of ~${Math.round(size)} chars, ${per10k.toFixed(3)} ms CPU per 10 KB`)
  return per10k
}

const typical = measure("typical (padded with prose)", fixtures.map(padded))
measure("dense (fixture repeated, worst case)", fixtures.map(repeated))
console.log(`target <= 0.2 ms per 10 KB for typical mail: ${typical <= 0.2 ? "OK" : "OVER"}`)
