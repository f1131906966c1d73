/**
 * What a reader of an HTML body sees and does not see, read with htmlparser2 (the parser mailparser
 * already brings): the visible text, text hidden by inline styles, and each link's text and href.
 * Only inline `style`, `hidden` and `bgcolor` are read: mail clients drop most `<style>` sheets, so a
 * sender who hides text reliably does it inline.
 */
import { Parser } from "htmlparser2"

export interface HtmlView {
  /** Text a reader sees, in order (whitespace as it came). */
  readonly visible: string
  /** Each stretch of text a reader cannot see, with whether visible text came before it. */
  readonly hidden: ReadonlyArray<{ readonly text: string; readonly afterVisible: boolean }>
  readonly links: ReadonlyArray<{ readonly href: string; readonly text: string }>
}

interface Frame {
  readonly tag: string
  readonly hidden: boolean
  readonly background: string | null
  readonly color: string | null
  readonly link: { href: string; text: string } | null
}

/** Text in these is never shown. */
const SILENT = new Set(["style", "script", "head", "title", "template", "noscript", "xml"])

const NAMED: Readonly<Record<string, string>> = {
  white: "#ffffff", black: "#000000", red: "#ff0000", blue: "#0000ff", green: "#008000", gray: "#808080", grey: "#808080",
  silver: "#c0c0c0", yellow: "#ffff00", transparent: "transparent"
}

/** A CSS colour in one spelling (#rrggbb), or null when it cannot be read. */
export const normalizeColor = (raw: string): string | null => {
  const c = raw.trim().toLowerCase().replace(/\s*!important$/, "")
  if (NAMED[c] !== undefined) return NAMED[c]!
  const short = /^#([0-9a-f])([0-9a-f])([0-9a-f])$/.exec(c)
  if (short) return `#${short[1]}${short[1]}${short[2]}${short[2]}${short[3]}${short[3]}`
  if (/^#[0-9a-f]{6}$/.test(c)) return c
  const rgb = /^rgba?\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*(?:,\s*([\d.]+)\s*)?\)$/.exec(c)
  if (rgb) {
    if (rgb[4] !== undefined && Number(rgb[4]) === 0) return "transparent"
    return "#" + [rgb[1], rgb[2], rgb[3]].map((n) => Math.min(255, Number(n)).toString(16).padStart(2, "0")).join("")
  }
  return null
}

const declarations = (style: string) => {
  const out = new Map<string, string>()
  for (const part of style.split(";")) {
    const colon = part.indexOf(":")
    if (colon > 0) out.set(part.slice(0, colon).trim().toLowerCase(), part.slice(colon + 1).trim().toLowerCase())
  }
  return out
}

/** A length of zero (or under 1px: unreadable) in any unit. */
const tiny = (v: string) => {
  const m = /^(-?[\d.]+)\s*(px|pt|em|rem|%|vw|vh)?/.exec(v.replace(/\s*!important$/, ""))
  if (!m) return false
  const n = Number(m[1])
  return m[2] === "px" || m[2] === "pt" ? n < 1 : n <= 0
}

const NO_STYLE: ReadonlyMap<string, string> = new Map()
const INK = /[^\s\u00a0\u200b-\u200d\u2060\ufeff\u034f\u00ad]/

const collapse = (s: string) => s.replace(/\s+/g, " ")

export const readHtml = (html: string): HtmlView => {
  const stack: Array<Frame> = []
  const top = (): Frame => stack[stack.length - 1] ?? { tag: "", hidden: false, background: null, color: null, link: null }
  let silent = 0
  const visible: Array<string> = []
  let seenVisible = false
  const hidden: Array<{ text: string; afterVisible: boolean }> = []
  const links: Array<{ href: string; text: string }> = []

  const parser = new Parser({
    onopentag(name, attrs) {
      if (SILENT.has(name)) silent++
      const parent = top()
      // Most elements carry no style or colour: nothing to read then.
      const css = attrs["style"]
      const style = css === undefined || css === "" ? NO_STYLE : declarations(css)
      const bgValue = style.get("background-color") ?? style.get("background")?.split(/\s+/)[0] ?? attrs["bgcolor"]
      const fgValue = style.get("color") ?? attrs["color"]
      const background = bgValue === undefined ? null : normalizeColor(bgValue)
      const color = fgValue === undefined ? null : normalizeColor(fgValue)
      const bg = background !== null && background !== "transparent" ? background : parent.background
      const fg = color ?? parent.color
      // Rule hidden_text: display:none, visibility:hidden, opacity 0, zero font size or line box
      // with overflow hidden, the `hidden` attribute, or text coloured like its background.
      const hides = style !== NO_STYLE && (style.get("display") === "none" || style.get("visibility") === "hidden" ||
        (style.has("opacity") && Number.parseFloat(style.get("opacity")!) === 0) ||
        (style.has("font-size") && tiny(style.get("font-size")!)) ||
        ((style.has("max-height") && tiny(style.get("max-height")!) || style.has("height") && tiny(style.get("height")!)) &&
          style.get("overflow") === "hidden") ||
        false) || "hidden" in attrs || (fg !== null && bg !== null && fg === bg)
      const link = name === "a" && attrs["href"] !== undefined ? { href: attrs["href"], text: "" } : parent.link
      stack.push({ tag: name, hidden: parent.hidden || hides, background: bg, color: fg, link })
      if (name === "br" || name === "p" || name === "div" || name === "td" || name === "li") visible.push(" ")
    },
    ontext(data) {
      if (silent > 0) return
      const f = top()
      if (f.link !== null) f.link.text += data
      if (f.hidden) {
        const last = hidden[hidden.length - 1]
        if (last !== undefined && last.afterVisible === seenVisible && hidden.length > 0 && lastWasHidden) last.text += data
        else hidden.push({ text: data, afterVisible: seenVisible })
        lastWasHidden = true
      } else {
        visible.push(data)
        if (!seenVisible && INK.test(data)) seenVisible = true
        lastWasHidden = false
      }
    },
    onclosetag(name) {
      if (SILENT.has(name) && silent > 0) silent--
      // htmlparser2 closes every element it opened, implied and void ones included, innermost first.
      let i = stack.length - 1
      while (i >= 0 && stack[i]!.tag !== name) i--
      if (i < 0) return
      const frame = stack[i]!
      stack.length = i
      if (frame.tag === "a" && frame.link !== null && (stack[i - 1]?.link ?? null) !== frame.link) {
        links.push({ href: frame.link.href, text: collapse(frame.link.text).trim() })
      }
    }
  }, { decodeEntities: true, lowerCaseTags: true, lowerCaseAttributeNames: true })
  let lastWasHidden = false
  parser.write(html)
  parser.end()
  return { visible: visible.join(""), hidden: hidden.map((h) => ({ ...h, text: collapse(h.text).trim() })), links }
}
