/** Worker-thread entry of AnalyzePool: several messages in flight at once, each answered with its Analysis by id. */
import { parentPort } from "node:worker_threads"
import { analyze } from "./Analyze.js"
import type { AuthCheckOptions } from "./Authenticity.js"

interface Job {
  readonly id: number
  readonly raw: Uint8Array
  readonly auth: AuthCheckOptions | null
}

parentPort?.on("message", (job: Job) => {
  // A view over the shared memory the message arrived in: no copy.
  const raw = Buffer.from(job.raw.buffer, job.raw.byteOffset, job.raw.byteLength)
  analyze(raw, job.auth).then(
    (analysis) => parentPort?.postMessage({ id: job.id, analysis }),
    (e: unknown) => parentPort?.postMessage({ id: job.id, error: e instanceof Error ? e.message : String(e) })
  )
})

parentPort?.postMessage({ ready: true })
