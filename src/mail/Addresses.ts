/**
 * Addresses of outgoing mail as callers write them: `addr`, `Name <addr>`, or (recipients only)
 * `registry:<name>/<handle>`. Exactly one plain address is accepted per string: a mail library
 * would read `a@x, b@y` as two recipients, and what is recorded must be what is sent.
 */
import addressparser from "nodemailer/lib/addressparser"
import { isPlainEmailAddress } from "../contract/EmailAddress.js"

export interface Mailbox {
  readonly name: string
  /** Lowercased. */
  readonly address: string
}

/** `Name <addr>` as a header shows it, or the bare address. */
export const formatMailbox = (m: Mailbox) =>
  m.name === "" ? m.address : `${/^[\p{L}\p{N} .'_-]+$/u.test(m.name) ? m.name : JSON.stringify(m.name)} <${m.address}>`

/** One mailbox, or why the text is not one. */
export const parseMailbox = (text: string): Mailbox | string => {
  const trimmed = text.trim()
  if (/[\r\n]/.test(trimmed)) return "must not contain line breaks"
  const parsed = addressparser(trimmed, { flatten: true })
  if (parsed.length !== 1) return "must be one address: `addr` or `Name <addr>`"
  const one = parsed[0]!
  if (!isPlainEmailAddress(one.address)) return "must be one address: `addr` or `Name <addr>` with a plain local@domain address"
  return { name: one.name.trim(), address: one.address.toLowerCase() }
}

/** `to`/`cc`/`bcc` as given: a string or a list of them. */
export const asList = (v: string | ReadonlyArray<string> | undefined): ReadonlyArray<string> =>
  v === undefined ? [] : typeof v === "string" ? [v] : v

/** The address inside a stored `Name <addr>` string (or the string itself). */
export const addressOf = (stored: string): string => {
  const m = /<([^<>]+)>\s*$/.exec(stored)
  return (m ? m[1]! : stored).trim().toLowerCase()
}

export const domainOf = (address: string) => address.slice(address.lastIndexOf("@") + 1)
