/**
 * The analysis pool (src/inbound/AnalyzePool.ts): a message of more than a few kilobytes is analysed
 * in its worker thread, reply text included, and the main thread reuses that reply text instead of parsing
 * the message again; a message that arrives while the pool is closing is still analysed.
 */
import { describe, expect, it } from "@effect/vitest"
import { makeAnalyzePool } from "../src/inbound/AnalyzePool.js"
import { extractReplyText, replyTextOf } from "../src/mail/ReplyText.js"

const reply = (n: number) =>
  Buffer.from([
    "From: Ana <ana@example.com>",
    "To: team@example.com",
    `Subject: Re: plan ${n}`,
    `Message-ID: <pool-${n}@example.com>`,
    "Content-Type: text/plain; charset=utf-8",
    "",
    `Sounds good, ship it (${n}).`,
    "",
    "On Mon, Jan 1, 2024 at 10:00 AM Bob <bob@example.com> wrote:",
    "> Shall we ship on Friday?",
    ...Array.from({ length: 80 }, (_, i) => `> ${i}: the history of the thread, quoted line after line.`),
    "> Bob",
    ""
  ].join("\r\n"))

describe("the analysis pool", () => {
  it("analyses a message of some kilobytes in its worker, reply text included, and the main thread reuses it", async () => {
    const pool = makeAnalyzePool()
    try {
      expect(reply(1).length).toBeGreaterThan(4 * 1024)
      const analyses = await Promise.all([1, 2, 3].map((n) => pool.analyze(reply(n), null)))
      for (const [i, a] of analyses.entries()) {
        expect(a.parseError).toBeNull()
        expect(a.parsed.subject).toBe(`Re: plan ${i + 1}`)
        // Computed in the worker (an analysis on the main thread leaves it to `replyTextOf`); the
        // main thread's own parse gives the same text.
        expect(a.replyText).toBe(`Sounds good, ship it (${i + 1}).`)
        expect(a.replyText).toBe(extractReplyText(a.parsed.text, a.parsed.html))
      }
      // The main thread is asked for the reply text of the worker's result: it answers what the
      // worker sent, without parsing (a parsed message whose text was changed after the fact
      // still answers the remembered value).
      const first = analyses[0]!
      const altered = first.parsed as { text: string | null }
      altered.text = "something else entirely"
      expect(replyTextOf(first.parsed)).toBe("Sounds good, ship it (1).")
    } finally {
      await pool.close()
    }
  })

  it("still analyses a message that arrives after the pool closed, rather than quarantining it", async () => {
    const pool = makeAnalyzePool()
    await pool.close()
    const a = await pool.analyze(reply(9), null)
    expect(a.parseError).toBeNull()
    expect(a.parsed.subject).toBe("Re: plan 9")
    expect(replyTextOf(a.parsed)).toBe("Sounds good, ship it (9).")
  })
})
