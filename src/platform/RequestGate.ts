/**
 * Admission of HTTP requests at the Node server itself, before the Effect runtime sees them: at most
 * `MAX_INFLIGHT_REQUESTS` are worked on at once; the next ones wait in arrival order, each at most
 * `maxWaitMs`, and one waiting past that (or arriving when `maxQueue` already wait) is answered 503
 * `service_unavailable` with `Retry-After` by a prebuilt response: no fiber, no parsing beyond Node's
 * own, no credential, no database.
 *
 * Why a queue rather than refusing at once: a client refused at once sends again at once, and under
 * overload the process then spends its time refusing; a request that waits costs nothing until it
 * runs, so the process keeps working at capacity and the wait stays about (waiting / capacity) —
 * bounded by `maxWaitMs`, so no request waits longer than that for admission.
 */
import { Context } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { envelopeOf, ServiceUnavailable } from "../contract/Errors.js"
import { newRequestId, pathOf } from "./RequestContext.js"
import { isShedExempt, SHED_RETRY_AFTER_SECONDS } from "./Shedding.js"

/** How long a request may wait for admission before it is refused. */
export const DEFAULT_MAX_WAIT_MS = 1_000

interface Waiting {
  readonly res: ServerResponse
  readonly run: () => void
  readonly until: number
}

export class RequestGate {
  private inflight = 0
  private readonly queue: Array<Waiting> = []
  /** Index of the queue's head (the array is compacted now and then, not shifted per request). */
  private head = 0
  private timer: ReturnType<typeof setTimeout> | undefined
  private readonly shedBody: string
  private shedCount = 0

  constructor(
    /** Requests worked on at once; 0: no cap (the gate lets everything through). */
    readonly cap: number,
    readonly maxWaitMs: number = DEFAULT_MAX_WAIT_MS,
    /** Requests waiting at most; past it a request is refused on arrival. */
    readonly maxQueue: number = Math.max(64, cap * 8)
  ) {
    this.shedBody = JSON.stringify(envelopeOf(
      new ServiceUnavailable({
        message: `the service is at capacity (${cap} requests in progress, the next waited ${maxWaitMs} ms); retry in ${SHED_RETRY_AFTER_SECONDS} s`,
        details: { retry_after: SHED_RETRY_AFTER_SECONDS }
      })
    ))
  }

  /** True while no request is admitted without waiting (the health probe says 503 then). */
  get full() {
    return this.cap > 0 && this.inflight >= this.cap
  }

  get waiting() {
    return this.queue.length - this.head
  }

  /** Requests refused by the gate so far. */
  get shed() {
    return this.shedCount
  }

  /**
   * Runs `run` (which hands the request to the app) now, later, or never (503). The health probe is
   * never held back: it answers for the whole process (see `isShedExempt`).
   */
  admit(req: IncomingMessage, res: ServerResponse, run: () => void) {
    if (this.cap <= 0 || isShedExempt(pathOf(req.url ?? "/"))) return run()
    if (this.inflight < this.cap && this.waiting === 0) return this.start(res, run)
    if (this.waiting >= this.maxQueue) return this.refuse(res)
    this.queue.push({ res, run, until: Date.now() + this.maxWaitMs })
    this.arm()
  }

  private start(res: ServerResponse, run: () => void) {
    this.inflight++
    let done = false
    const release = () => {
      if (done) return
      done = true
      this.inflight--
      this.pump()
    }
    res.once("finish", release)
    res.once("close", release)
    run()
  }

  /** Admits waiting requests while there is room; the ones whose client left are dropped. */
  private pump() {
    const now = Date.now()
    while (this.inflight < this.cap && this.waiting > 0) {
      const next = this.queue[this.head]!
      this.queue[this.head++] = undefined as unknown as Waiting
      if (next.res.destroyed || next.res.socket === null || next.res.socket.destroyed) continue
      if (next.until <= now) this.refuse(next.res)
      else this.start(next.res, next.run)
    }
    this.compact()
  }

  private compact() {
    if (this.head === this.queue.length) {
      this.queue.length = 0
      this.head = 0
    } else if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head)
      this.head = 0
    }
  }

  /** One timer for the head's deadline: waiting requests are in deadline order. */
  private arm() {
    if (this.timer !== undefined || this.waiting === 0) return
    const delay = Math.max(0, this.queue[this.head]!.until - Date.now())
    this.timer = setTimeout(() => {
      this.timer = undefined
      const now = Date.now()
      while (this.waiting > 0 && this.queue[this.head]!.until <= now) {
        const late = this.queue[this.head]!
        this.queue[this.head++] = undefined as unknown as Waiting
        if (!late.res.destroyed) this.refuse(late.res)
      }
      this.compact()
      this.arm()
    }, delay)
    this.timer.unref()
  }

  private refuse(res: ServerResponse) {
    this.shedCount++
    if (res.headersSent || res.destroyed) return
    res.writeHead(503, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(this.shedBody),
      "retry-after": String(SHED_RETRY_AFTER_SECONDS),
      "x-request-id": newRequestId()
    })
    res.end(this.shedBody)
  }

  /** Stops the deadline timer (the server is closing). */
  close() {
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = undefined
  }
}

/** The gate of the server being built: its pipeline reads whether the process is full. */
export class CurrentRequestGate extends Context.Tag("mailroom/CurrentRequestGate")<CurrentRequestGate, RequestGate>() {}
