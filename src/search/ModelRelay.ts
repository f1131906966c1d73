/**
 * The built-in model shared by the workers of `WORKERS` (platform/Workers.ts): the primary runs the
 * one model process (ModelProcess.ts) and each worker reaches it through the primary over the
 * cluster's IPC channel, so N workers load the model once, and a worker that is restarted does not
 * restart the model. Vectors travel as base64 float32 (the cluster channel carries JSON).
 */
import cluster, { type Worker } from "node:cluster"
import type { ModelHost, Pending, Priority } from "./ModelProcess.js"

const REQUEST = "mailroom:embed"
const ANSWER = "mailroom:embedded"

interface Request {
  readonly [REQUEST]: { readonly id: number; readonly texts: ReadonlyArray<string>; readonly priority: Priority }
}
interface Answer {
  readonly [ANSWER]: { readonly id: number; readonly vectors?: ReadonlyArray<string>; readonly error?: string }
}

const encode = (v: Float32Array) => Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64")
const decode = (s: string) => {
  const b = Buffer.from(s, "base64")
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength))
}

/** In the primary: answers the workers' requests with `host`; the function returned stops it. */
export const serveModelToWorkers = (host: ModelHost) => {
  const onMessage = (worker: Worker, m: unknown) => {
    if (typeof m !== "object" || m === null || !(REQUEST in m)) return
    const { id, texts, priority } = (m as Request)[REQUEST]
    const reply = (answer: Answer[typeof ANSWER]) => {
      if (worker.isConnected()) worker.send({ [ANSWER]: answer } satisfies Answer, () => {})
    }
    host.embed(texts, priority).promise.then(
      (vectors) => reply({ id, vectors: vectors.map(encode) }),
      (e: Error) => reply({ id, error: e.message })
    )
  }
  cluster.on("message", onMessage)
  return () => void cluster.off("message", onMessage)
}

/** In a worker: the model as the primary serves it. */
export const modelThroughPrimary = (): Pick<ModelHost, "embed"> => {
  let nextId = 0
  const waiting = new Map<number, { resolve: (v: ReadonlyArray<Float32Array>) => void; reject: (e: Error) => void }>()
  process.on("message", (m: unknown) => {
    if (typeof m !== "object" || m === null || !(ANSWER in m)) return
    const { id, vectors, error } = (m as Answer)[ANSWER]
    const w = waiting.get(id)
    if (w === undefined) return
    waiting.delete(id)
    if (error !== undefined || vectors === undefined) w.reject(new Error(error ?? "no vectors"))
    else w.resolve(vectors.map(decode))
  })
  const embed = (texts: ReadonlyArray<string>, priority: Priority): Pending => {
    const id = nextId++
    const promise = new Promise<ReadonlyArray<Float32Array>>((resolve, reject) => {
      if (process.send === undefined) return reject(new Error("no primary to reach the embedding model through"))
      waiting.set(id, { resolve, reject })
      process.send({ [REQUEST]: { id, texts, priority } } satisfies Request, undefined, undefined, (e: Error | null) => {
        if (e !== null && waiting.delete(id)) reject(e)
      })
    })
    // The primary's answer to a request given up on is dropped when it arrives.
    return { promise, cancel: () => void waiting.delete(id) }
  }
  return { embed }
}
