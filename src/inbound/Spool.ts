/**
 * Receiving one SMTP DATA stream without holding a large message in memory while it arrives: the
 * first SPOOL_THRESHOLD bytes stay in memory (almost every message ends there), the rest goes to a
 * file under `DATA_DIR/spool` written with backpressure. Past the size limit nothing more is kept and
 * the stream is drained, so a refused 1 GB stream costs neither memory nor disk. A spool file lives
 * only while its message arrives: it is read back and removed at the end of DATA, and removed when the
 * stream fails or the client goes away; files left by a crashed process are removed at start-up.
 */
import { randomBytes } from "node:crypto"
import { createWriteStream, mkdirSync, readdirSync, rmSync, type WriteStream } from "node:fs"
import { open, rm } from "node:fs/promises"
import { join } from "node:path"
import type { Readable } from "node:stream"
import { runInNewContext } from "node:vm"

/**
 * A long stream's chunks (socket reads, 64 KB each) are garbage as soon as they are on disk, but
 * their memory lies outside the JavaScript heap, which barely grows meanwhile, so collections are
 * rare and 20-40 MB of dead chunks piled up between them. A young-generation collection (about a
 * millisecond) every MiB of a long stream frees them: a refused 1 GB stream then adds about +6 MB
 * (every 4 MB: +8 to +12 MB; never: +30-40 MB). The service's entry point (`main.ts`) exposes `gc`
 * with a V8 flag at start; it is taken from a separate context, never given to the service's own
 * code, and looked up at the first long stream (without the flag, as in tests run in process, the
 * collections are skipped).
 */
let youngCollector: ((options: { type: "minor"; execution: "sync" }) => void) | null | undefined
const collectYoung = () => {
  if (youngCollector === undefined) youngCollector = runInNewContext("typeof gc === 'function' ? gc : null")
  youngCollector?.({ type: "minor", execution: "sync" })
}
const COLLECT_EVERY = 1024 * 1024

const SPOOL_THRESHOLD = 1024 * 1024

export type Received =
  | { readonly _tag: "Complete"; readonly raw: Buffer }
  | { readonly _tag: "TooLarge"; readonly size: number }

/** The message in shared memory, so that it reaches the analysis worker without a copy. */
const sharedBuffer = (size: number) => Buffer.from(new SharedArrayBuffer(size))

const readShared = async (path: string, size: number) => {
  const raw = sharedBuffer(size)
  const handle = await open(path, "r")
  try {
    let at = 0
    while (at < size) {
      const { bytesRead } = await handle.read(raw, at, size - at, at)
      if (bytesRead === 0) throw new Error(`spool file ${path} is shorter than the message`)
      at += bytesRead
    }
  } finally {
    await handle.close()
  }
  return raw
}

export const spoolDirectory = (dataDir: string) => join(dataDir, "spool")

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    // EPERM: the process exists but belongs to someone else.
    return (e as NodeJS.ErrnoException).code === "EPERM"
  }
}

/**
 * Creates the spool directory and removes files left by processes that no longer run. Files are
 * named `<pid>-<random>`, so processes sharing a DATA_DIR never remove each other's live files.
 */
export const prepareSpool = (dir: string) => {
  mkdirSync(dir, { recursive: true })
  for (const name of readdirSync(dir)) {
    const pid = Number(/^(\d+)-/.exec(name)?.[1])
    if (!Number.isInteger(pid) || pid === process.pid || !alive(pid)) rmSync(join(dir, name), { force: true })
  }
}

/**
 * Reads one DATA stream. Resolves when it ends (with the message, or its size when it exceeded
 * `limit`); rejects when the stream fails or closes early (client gone), with the spool file removed
 * in every case.
 */
export const receive = (stream: Readable, options: { readonly dir: string; readonly limit: number; readonly threshold?: number }) =>
  new Promise<Received>((resolve, reject) => {
    const threshold = options.threshold ?? SPOOL_THRESHOLD
    let chunks: Array<Buffer> = []
    let size = 0
    let file: WriteStream | undefined
    let path: string | undefined
    let settled = false
    let ended = false

    const removeFile = () => {
      const f = file
      const p = path
      file = undefined
      path = undefined
      if (f === undefined || p === undefined) return Promise.resolve()
      // Writes still queued when the file is dropped fail with ERR_STREAM_DESTROYED; the file is
      // unwanted by then, so those errors are expected, not a failure of the message.
      f.off("error", fail)
      f.on("error", () => {})
      // The descriptor is closed first; the name is removed at once either way.
      f.destroy()
      return rm(p, { force: true })
    }
    const fail = (e: Error) => {
      if (settled) return
      settled = true
      chunks = []
      void removeFile().finally(() => reject(e))
    }

    stream.on("data", (chunk: Buffer) => {
      if (settled) return
      if (Math.floor((size + chunk.length) / COLLECT_EVERY) > Math.floor(size / COLLECT_EVERY)) {
        collectYoung()
      }
      size += chunk.length
      if (size > options.limit) {
        // Refused anyway: release what was kept and drain the rest.
        if (chunks.length > 0) chunks = []
        if (file !== undefined) void removeFile()
        return
      }
      if (file !== undefined) {
        if (!file.write(chunk)) {
          stream.pause()
          file.once("drain", () => stream.resume())
        }
        return
      }
      chunks.push(chunk)
      if (size > threshold) {
        path = join(options.dir, `${process.pid}-${randomBytes(8).toString("hex")}`)
        file = createWriteStream(path, { flags: "wx", mode: 0o600 })
        file.on("error", fail)
        const kept = chunks
        chunks = []
        let flowing = true
        for (const c of kept) flowing = file.write(c) && flowing
        if (!flowing) {
          stream.pause()
          file.once("drain", () => stream.resume())
        }
      }
    })
    stream.once("error", fail)
    stream.once("close", () => {
      if (!ended) fail(new Error("the client went away before the end of the message"))
    })
    stream.once("end", () => {
      ended = true
      if (settled) return
      if (size > options.limit) {
        settled = true
        return resolve({ _tag: "TooLarge", size })
      }
      if (file === undefined) {
        settled = true
        const raw = sharedBuffer(size)
        let at = 0
        for (const c of chunks) at += c.copy(raw, at)
        chunks = []
        return resolve({ _tag: "Complete", raw })
      }
      const f = file
      const p = path!
      f.end(() => {
        if (settled) return
        readShared(p, size).then(
          (raw) => {
            if (settled) return
            settled = true
            file = undefined
            path = undefined
            // Removed before the message is handed on, so no spool file outlives its DATA.
            rm(p, { force: true }).then(() => resolve({ _tag: "Complete", raw }), () => resolve({ _tag: "Complete", raw }))
          },
          (e: Error) => fail(e)
        )
      })
    })
  })
