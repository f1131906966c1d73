/** Worker-thread entry of AnalyzePool: several messages in flight at once, each answered with its Analysis by id. */
import { parentPort } from "node:worker_threads"
import { replyTextOf } from "../mail/ReplyText.js"
import { type Analysis, analyze } from "./Analyze.js"
import type { AuthCheckOptions } from "./Authenticity.js"

interface Job {
  readonly id: number
  readonly raw: Uint8Array
  readonly auth: AuthCheckOptions | null
}

/**
 * The reply text is computed here too, off the main thread (the pool hands it to `replyTextOf`); a
 * failure leaves it to be computed where it is needed, where it fails as it would have.
 */
const withReplyText = (analysis: Analysis): Analysis => {
  try {
    return { ...analysis, replyText: replyTextOf(analysis.parsed) }
  } catch {
    return analysis
  }
}

parentPort?.on("message", (job: Job) => {
  // A view over the shared memory the message arrived in: no copy.
  const raw = Buffer.from(job.raw.buffer, job.raw.byteOffset, job.raw.byteLength)
  analyze(raw, job.auth).then(
    (analysis) => parentPort?.postMessage({ id: job.id, analysis: withReplyText(analysis) }),
    (e: unknown) => parentPort?.postMessage({ id: job.id, error: e instanceof Error ? e.message : String(e) })
  )
})

parentPort?.postMessage({ ready: true })
