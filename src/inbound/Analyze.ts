/**
 * Everything derived from a received message before it is stored: MIME parse, SPF/DKIM/DMARC,
 * spam score and event type. The CPU-heavy part of ingestion, so it runs in worker threads
 * (AnalyzePool.ts); `analyze` itself is an ordinary function.
 */
import { type AuthCheckOptions, type AuthResults, checkAuthenticity, NO_AUTH_CHECK } from "./Authenticity.js"
import { classify, type EventType } from "./Classify.js"
import { emptyParsed, parseEmail, type ParsedEmail } from "../mail/Parse.js"
import { scoreSpam, type SpamVerdict } from "./SpamScore.js"
import { type Signal, trustSignals } from "../mail/Signals.js"

export interface Analysis {
  readonly parsed: ParsedEmail
  readonly parseError: string | null
  readonly auth: AuthResults
  /** The From address when DMARC or an aligned DKIM signature proves it (Authenticity.ts); else null. */
  readonly authenticatedFrom: string | null
  /** The From address when it may become a known sender (Authenticity.ts `knownFrom`); else null. */
  readonly knownFrom: string | null
  readonly spam: SpamVerdict
  readonly event: EventType
  /** Trust signals the content raises (src/mail/Signals.ts). */
  readonly signals: ReadonlyArray<Signal>
  /**
   * The reply text of `parsed` (`replyTextOf`) when a worker thread analysed the message and
   * computed it there (AnalyzeWorker.ts); otherwise it is computed where it is needed.
   */
  readonly replyText?: string | null | undefined
}

export const PARSE_TIMEOUT_MS = 10_000

const withTimeout = <A>(p: Promise<A>, ms: number, what: string) =>
  new Promise<A>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms)
    p.then((v) => {
      clearTimeout(t)
      resolve(v)
    }, (e) => {
      clearTimeout(t)
      reject(e)
    })
  })

/** The verdict for a message whose parse failed: stored raw with `parse_error`, never dropped. */
export const unparsed = (raw: Buffer, parseError: string, auth: AuthResults): Analysis => ({
  parsed: emptyParsed,
  parseError,
  auth,
  authenticatedFrom: null,
  knownFrom: null,
  spam: scoreSpam(emptyParsed, auth),
  event: classify(emptyParsed, raw),
  signals: []
})

const safeSignals = (parsed: ParsedEmail): ReadonlyArray<Signal> => {
  try {
    return trustSignals(parsed)
  } catch {
    return []
  }
}

/** `auth` null: no client address (nothing to check SPF against). */
export const analyze = async (raw: Buffer, auth: AuthCheckOptions | null): Promise<Analysis> => {
  let parsed: ParsedEmail = emptyParsed
  let parseError: string | null = null
  // The authenticity checks wait on DNS: they run while the message is parsed.
  const authenticity = auth === null ? Promise.resolve(NO_AUTH_CHECK) : checkAuthenticity(raw, auth)
  try {
    parsed = await withTimeout(parseEmail(raw), PARSE_TIMEOUT_MS, "MIME parsing")
  } catch (e) {
    parseError = e instanceof Error ? e.message : String(e)
  }
  const { authenticatedFrom, knownFrom, results } = await authenticity
  return {
    parsed,
    parseError,
    auth: results,
    // Proven for the address the parser read too: two readings of one From header must not differ.
    authenticatedFrom: authenticatedFrom !== null && authenticatedFrom === parsed.from?.address ? authenticatedFrom : null,
    knownFrom: knownFrom !== null && knownFrom === parsed.from?.address?.trim().toLowerCase() ? knownFrom : null,
    spam: scoreSpam(parsed, results),
    event: classify(parsed, raw),
    // A rule failing on strange input must not cost the message its acceptance.
    signals: parseError === null ? safeSignals(parsed) : []
  }
}
