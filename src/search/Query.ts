/**
 * What the trigram leg needs from a websearch-syntax query: the words to look for (a quoted phrase
 * asks for exactly those words, so it is not looked for approximately; `or` and excluded terms are
 * left out) and the excluded terms, which bind the trigram leg too.
 */
export interface ParsedQuery {
  readonly positive: string
  readonly excluded: ReadonlyArray<string>
}

export const parseQuery = (q: string): ParsedQuery => {
  const positive: Array<string> = []
  const excluded: Array<string> = []
  for (const m of q.matchAll(/(-?)"([^"]*)"?|(-?)([^\s"]+)/g)) {
    const negated = (m[1] ?? m[3] ?? "") === "-"
    const phrase = m[2] !== undefined
    const text = (phrase ? m[2]! : m[4]!).trim()
    if (text === "" || (!phrase && !negated && text.toLowerCase() === "or")) continue
    if (negated) excluded.push(phrase ? `"${text.replace(/"/g, "")}"` : text)
    else if (!phrase) positive.push(text)
  }
  return { positive: positive.join(" ").toLowerCase(), excluded }
}
