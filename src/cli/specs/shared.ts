/**
 * Flags and arguments that several areas' commands declare alike, so their help reads the same
 * everywhere (paging, date ranges, the `<function>` argument).
 */
import { flag, integer, text, textArg } from "../Spec.js"

export const paging = {
  limit: integer("limit", "page size, 1 to 100 (default 50)", { min: 1, max: 100 }),
  cursor: text("cursor", "CURSOR", "continue after the previous page (its meta.cursor)"),
  all: flag("all", "follow the cursors and print every page")
}

export const dateRange = {
  from: text("from", "DATE", "created at or after this time (ISO 8601, e.g. 2026-01-31T00:00:00Z)"),
  to: text("to", "DATE", "created at or before this time (ISO 8601)")
}

/** Examples write ids as a placeholder: a real UUID makes the line too long to read. */
export const ID = "<id>"

export const functionRef = textArg("function", "the function's id or name (`mailroom functions list` shows them)")
