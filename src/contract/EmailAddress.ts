/**
 * The one email field of the API (sign-up, claim, the /device sign-in form): exactly one plain
 * addr-spec, `local@domain`. A mail library reads a string such as `a@corp.test<b@evil.test>` or
 * `a@corp.test, b@evil.test` as a display name plus another address, or as a list, so anything
 * beyond a dot-atom local part and a DNS host name is refused rather than "cleaned": no display
 * names, brackets, commas, semicolons, quotes, comments, whitespace or IP literals.
 */
import { Schema } from "effect"

export const EMAIL_MAX_LENGTH = 254
const LOCAL_MAX_LENGTH = 64

/** RFC 5322 `atext`, dot-separated (dot-atom): no leading, trailing or doubled dots. */
const LOCAL_PART = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/
const LABEL = /^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$/

export const isPlainEmailAddress = (s: string): boolean => {
  if (s.length > EMAIL_MAX_LENGTH) return false
  const parts = s.split("@")
  if (parts.length !== 2) return false
  const [local, domain] = parts as [string, string]
  if (local.length === 0 || local.length > LOCAL_MAX_LENGTH || !LOCAL_PART.test(local)) return false
  const labels = domain.split(".")
  if (labels.length < 2 || !labels.every((l) => LABEL.test(l))) return false
  // A top-level label is never all digits (that would be an IP address written as a host).
  return !/^[0-9]+$/.test(labels[labels.length - 1]!)
}

const DESCRIPTION = `one plain email address (local@domain), at most ${EMAIL_MAX_LENGTH} characters`

export const EmailAddress = Schema.String.pipe(
  Schema.maxLength(EMAIL_MAX_LENGTH),
  Schema.filter(
    (s) =>
      isPlainEmailAddress(s) ||
      "must be one plain email address (local@domain): no display name, angle brackets, commas, semicolons or spaces",
    { description: DESCRIPTION, jsonSchema: { format: "email", maxLength: EMAIL_MAX_LENGTH } }
  )
)
