/** A raw Server-Sent Events reader over fetch, as a plain client reads `GET /v1/events`. */

export interface SseEvent {
  readonly id: string | undefined
  readonly event: string | undefined
  readonly data: string
  /** When the event was parsed (ms since epoch). */
  readonly at: number
}

export interface SseStream {
  readonly status: number
  readonly headers: Headers
  /** Error body when the status is not 200. */
  readonly text: string
  readonly events: Array<SseEvent>
  readonly comments: Array<string>
  /** Resolves when `count` events have arrived (rejects after `timeoutMs`). */
  readonly waitFor: (count: number, timeoutMs?: number) => Promise<ReadonlyArray<SseEvent>>
  readonly waitForComment: (pattern: RegExp, timeoutMs?: number) => Promise<string>
  readonly close: () => void
}

export const openSse = async (url: string, token: string, headers: Record<string, string> = {}): Promise<SseStream> => {
  const abort = new AbortController()
  const res = await fetch(url, {
    headers: { accept: "text/event-stream", authorization: `Bearer ${token}`, ...headers },
    signal: abort.signal
  })
  const events: Array<SseEvent> = []
  const comments: Array<string> = []
  const listeners = new Set<() => void>()
  const notify = () => listeners.forEach((l) => l())
  if (res.status !== 200 || res.body === null) {
    const text = await res.text()
    return { status: res.status, headers: res.headers, text, events, comments, waitFor: () => Promise.reject(new Error(text)), waitForComment: () => Promise.reject(new Error(text)), close: () => abort.abort() }
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ""
  void (async () => {
    try {
      while (true) {
        const { done, value } = await reader.read()
        if (done) break
        buffer += value
        let end: number
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          let id: string | undefined
          let event: string | undefined
          const data: Array<string> = []
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) comments.push(line.slice(1).trim())
            else if (line.startsWith("id: ")) id = line.slice(4)
            else if (line.startsWith("event: ")) event = line.slice(7)
            else if (line.startsWith("data: ")) data.push(line.slice(6))
          }
          if (data.length > 0) events.push({ id, event, data: data.join("\n"), at: Date.now() })
          notify()
        }
      }
    } catch {
      // aborted
    }
  })()
  const until = <A>(check: () => A | undefined, timeoutMs: number, what: string) =>
    new Promise<A>((resolve, reject) => {
      const tick = () => {
        const v = check()
        if (v !== undefined) {
          listeners.delete(tick)
          clearTimeout(timer)
          resolve(v)
        }
      }
      const timer = setTimeout(() => {
        listeners.delete(tick)
        reject(new Error(`timed out waiting for ${what}; got ${events.length} events: ${events.map((e) => e.event).join(",")}`))
      }, timeoutMs)
      listeners.add(tick)
      tick()
    })
  return {
    status: res.status,
    headers: res.headers,
    text: "",
    events,
    comments,
    waitFor: (count, timeoutMs = 20_000) => until(() => (events.length >= count ? events.slice(0, count) : undefined), timeoutMs, `${count} events`),
    waitForComment: (pattern, timeoutMs = 20_000) => until(() => comments.find((c) => pattern.test(c)), timeoutMs, `comment ${pattern}`),
    close: () => abort.abort()
  }
}
