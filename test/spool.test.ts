/**
 * The DATA spool on its own: a stream past the limit is refused (never a failure), whatever the
 * spool file was doing when the limit was crossed, and no spool file outlives its message.
 */
import { describe, expect, it } from "@effect/vitest"
import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { PassThrough } from "node:stream"
import { receive } from "../src/inbound/Spool.js"

/** Writes `total` bytes a few chunks per turn of the event loop, as socket reads arrive. */
const feed = (stream: PassThrough, total: number, chunk: number) => {
  let sent = 0
  const tick = () => {
    for (let k = 0; k < 4 && sent < total; k++) {
      const n = Math.min(chunk, total - sent)
      sent += n
      stream.write(Buffer.alloc(n, 0x61))
    }
    if (sent < total) setImmediate(tick)
    else stream.end()
  }
  tick()
}

describe("spool", () => {
  it("refuses an over-limit stream as TooLarge even when the limit is crossed with spool writes in flight", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mailroom-spool-"))
    try {
      for (let i = 0; i < 100; i++) {
        const stream = new PassThrough({ highWaterMark: 1024 * 1024 })
        const limit = 300_000 + i * 7919
        const pending = receive(stream, { dir, limit, threshold: 64 * 1024 })
        feed(stream, limit * 2, 1000 + (i % 4) * 1000)
        const r = await pending.then((x) => x._tag === "TooLarge" ? `TooLarge:${x.size}` : "Complete", (e: Error) => `failed:${e.message}`)
        expect(r).toBe(`TooLarge:${limit * 2}`)
      }
      await new Promise((r) => setTimeout(r, 50))
      expect(readdirSync(dir)).toEqual([])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it("keeps a message under the limit byte for byte, in memory or through the spool file, and removes the file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mailroom-spool-"))
    try {
      for (const total of [1000, 64 * 1024, 64 * 1024 + 1, 3 * 1024 * 1024 + 17]) {
        const stream = new PassThrough()
        const pending = receive(stream, { dir, limit: 4 * 1024 * 1024, threshold: 64 * 1024 })
        feed(stream, total, 10_000)
        const r = await pending
        expect(r._tag).toBe("Complete")
        if (r._tag === "Complete") {
          expect(r.raw.length).toBe(total)
          expect(r.raw.every((b) => b === 0x61)).toBe(true)
        }
        expect(readdirSync(dir)).toEqual([])
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
