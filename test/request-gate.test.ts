/**
 * The admission gate in front of the HTTP app: past the cap requests wait in arrival order and run
 * as slots free, a request waiting past the bound (or arriving to a full queue) is refused with the
 * 503 envelope and Retry-After, and the health probe is never held back.
 */
import { describe, expect, it } from "vitest"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { RequestGate } from "../src/platform/RequestGate.js"

const serve = (gate: RequestGate, handler: (req: IncomingMessage, res: ServerResponse) => void) =>
  new Promise<{ server: Server; base: string }>((resolve) => {
    const server = createServer((req, res) => gate.admit(req, res, () => handler(req, res)))
    server.listen(0, "127.0.0.1", () => resolve({ server, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }))
  })

const get = async (url: string) => {
  const t0 = Date.now()
  const r = await fetch(url)
  return { status: r.status, text: await r.text(), headers: r.headers, ms: Date.now() - t0 }
}

describe("RequestGate", () => {
  it("holds requests past the cap and runs them in order as slots free; none is refused within the bound", async () => {
    const gate = new RequestGate(2, 5_000)
    const order: Array<string> = []
    const held: Array<() => void> = []
    const { server, base } = await serve(gate, (req, res) => {
      if (req.url === "/v1/health") return res.end("up")
      order.push(req.url!)
      held.push(() => res.end("ok"))
    })
    try {
      const replies = [1, 2, 3, 4, 5].map((i) => get(`${base}/r${i}`))
      while (held.length < 2) await new Promise((r) => setTimeout(r, 10))
      await new Promise((r) => setTimeout(r, 100))
      // Two run, three wait without anything having reached the app.
      expect(order).toEqual(expect.arrayContaining(["/r1", "/r2"]))
      expect(order.length).toBe(2)
      expect(gate.waiting).toBe(3)
      expect(gate.full).toBe(true)
      // The probe is never held back.
      const health = await get(`${base}/v1/health`)
      expect(health.status).toBe(200)
      while (order.length < 5 || held.length > 0) {
        held.shift()?.()
        await new Promise((r) => setTimeout(r, 10))
      }
      const statuses = (await Promise.all(replies)).map((r) => r.status)
      expect(statuses).toEqual([200, 200, 200, 200, 200])
      expect(order.slice(2)).toEqual(["/r3", "/r4", "/r5"])
      expect(gate.shed).toBe(0)
      expect(gate.full).toBe(false)
    } finally {
      server.closeAllConnections()
      server.close()
      gate.close()
    }
  })

  it("refuses a request that waited past the bound, and one arriving to a full queue at once, with the 503 envelope", async () => {
    const gate = new RequestGate(1, 300, 1)
    const held: Array<() => void> = []
    let ran = 0
    const { server, base } = await serve(gate, (_req, res) => {
      ran++
      held.push(() => res.end("ok"))
    })
    try {
      const first = get(`${base}/a`)
      while (held.length < 1) await new Promise((r) => setTimeout(r, 10))
      const waited = get(`${base}/b`)
      await new Promise((r) => setTimeout(r, 50))
      // The queue holds one: the next is refused on arrival.
      const full = await get(`${base}/c`)
      expect(full.status).toBe(503)
      expect(full.ms).toBeLessThan(250)
      const late = await waited
      expect(late.status).toBe(503)
      expect(late.ms).toBeGreaterThanOrEqual(250)
      expect(late.ms).toBeLessThan(2_000)
      expect(late.headers.get("retry-after")).toBe("1")
      expect(late.headers.get("x-request-id")).toMatch(/^req_/)
      expect(JSON.parse(late.text)).toEqual({
        success: false,
        error: { code: "service_unavailable", message: expect.stringContaining("capacity"), details: { retry_after: 1 } }
      })
      expect(ran).toBe(1)
      expect(gate.shed).toBe(2)
      held.shift()!()
      expect((await first).status).toBe(200)
      // Room again: the next request runs at once.
      const next = get(`${base}/d`)
      while (held.length < 1) await new Promise((r) => setTimeout(r, 10))
      held.shift()!()
      expect((await next).status).toBe(200)
    } finally {
      server.closeAllConnections()
      server.close()
      gate.close()
    }
  })

  it("a waiting request whose client left is dropped, not run", async () => {
    const gate = new RequestGate(1, 5_000)
    const held: Array<() => void> = []
    const urls: Array<string> = []
    const { server, base } = await serve(gate, (req, res) => {
      urls.push(req.url!)
      held.push(() => res.end("ok"))
    })
    try {
      const first = get(`${base}/a`)
      while (held.length < 1) await new Promise((r) => setTimeout(r, 10))
      const abort = new AbortController()
      const gone = fetch(`${base}/gone`, { signal: abort.signal }).catch(() => "aborted")
      await new Promise((r) => setTimeout(r, 50))
      abort.abort()
      expect(await gone).toBe("aborted")
      await new Promise((r) => setTimeout(r, 50))
      held.shift()!()
      expect((await first).status).toBe(200)
      const after = get(`${base}/after`)
      while (held.length < 1) await new Promise((r) => setTimeout(r, 10))
      held.shift()!()
      expect((await after).status).toBe(200)
      expect(urls).toEqual(["/a", "/after"])
    } finally {
      server.closeAllConnections()
      server.close()
      gate.close()
    }
  })
})
