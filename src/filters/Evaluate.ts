/**
 * Applying organization filters and endpoint rules to one inbound message (
 * organization filters, then the endpoint's `rules`, then its `event_types`), for the inbound
 * pipeline. Pure functions: the caller loads the filters and the endpoint (the route resolver does, with
 * the recipient).
 */
import type { Rules } from "../endpoints/Api.js"
import { matchesSender } from "../mail/SenderPatterns.js"

export interface FilterLike {
  readonly type: "whitelist" | "blocklist" | "registry" | "quarantine"
  /** A sender pattern; for `registry`, a registry's name; for `quarantine`, a sender pattern or "" (any sender). */
  readonly pattern: string
  /** `quarantine` only: the trust signals that quarantine (any of them). */
  readonly signals?: ReadonlyArray<string> | null
}

export type FilterVerdict =
  | { readonly allowed: true; readonly reason: "no_filters" | "whitelisted" | "registry_verified" | "not_blocked" }
  | { readonly allowed: false; readonly reason: "blocklisted" | "not_whitelisted"; readonly pattern?: string }

/**
 * The quarantine filter that holds a message back, if any: one raising any of the filter's signals
 * and, when the filter names a sender pattern, from a matching sender (both must match).
 */
export const quarantineMatch = (
  filters: ReadonlyArray<FilterLike>,
  sender: string,
  signals: ReadonlyArray<string>
): FilterLike | undefined =>
  filters.find((f) =>
    f.type === "quarantine" && (f.signals ?? []).some((s) => signals.includes(s)) &&
    (f.pattern === "" || matchesSender(f.pattern, sender))
  )

/**
 * Allow rules are `whitelist` filters and `registry` filters (the sender was verified as a published
 * entry of that registry: `registries` lists the registries it was verified in). An allow match
 * always admits the sender (so `@acme.com` can be blocked while `ceo@acme.com` is allowed);
 * otherwise a blocklist match refuses it; otherwise, when any allow rule applies, the sender is
 * refused for matching none of them.
 */
export const evaluateFilters = (
  filters: ReadonlyArray<FilterLike>,
  sender: string,
  registries: ReadonlyArray<string> = []
): FilterVerdict => {
  if (filters.length === 0) return { allowed: true, reason: "no_filters" }
  const whitelists = filters.filter((f) => f.type === "whitelist")
  if (whitelists.some((f) => matchesSender(f.pattern, sender))) return { allowed: true, reason: "whitelisted" }
  const registryRules = filters.filter((f) => f.type === "registry")
  if (registryRules.some((f) => registries.includes(f.pattern))) return { allowed: true, reason: "registry_verified" }
  const blocked = filters.find((f) => f.type === "blocklist" && matchesSender(f.pattern, sender))
  if (blocked !== undefined) return { allowed: false, reason: "blocklisted", pattern: blocked.pattern }
  if (whitelists.length > 0 || registryRules.length > 0) return { allowed: false, reason: "not_whitelisted" }
  return { allowed: true, reason: "not_blocked" }
}

export interface MessageFacts {
  readonly sender: string
  /** Approximate total size of the message in bytes. */
  readonly sizeBytes: number
  /** Approximate total size of its attachments in bytes. */
  readonly attachmentBytes: number
  readonly attachmentCount: number
  readonly eventType: string
}

export type RuleVerdict = { readonly deliver: true } | { readonly deliver: false; readonly rule: keyof Rules }

const MB = 1024 * 1024

/** All present rules ANDed; `{}` delivers everything. Sender lists compare addresses case-insensitively. */
export const evaluateRules = (rules: Rules, m: MessageFacts): RuleVerdict => {
  const sender = m.sender.trim().toLowerCase()
  if (rules.max_size_bytes !== undefined && m.sizeBytes > rules.max_size_bytes) return { deliver: false, rule: "max_size_bytes" }
  if (rules.exclude_attachments === true && m.attachmentCount > 0) return { deliver: false, rule: "exclude_attachments" }
  if (rules.attachment_limit_mb !== undefined && m.attachmentBytes > rules.attachment_limit_mb * MB) {
    return { deliver: false, rule: "attachment_limit_mb" }
  }
  if (rules.sender_whitelist !== undefined && !rules.sender_whitelist.some((a) => a.trim().toLowerCase() === sender)) {
    return { deliver: false, rule: "sender_whitelist" }
  }
  if (rules.sender_blacklist !== undefined && rules.sender_blacklist.some((a) => a.trim().toLowerCase() === sender)) {
    return { deliver: false, rule: "sender_blacklist" }
  }
  if (rules.event_types !== undefined && !rules.event_types.includes(m.eventType)) return { deliver: false, rule: "event_types" }
  return { deliver: true }
}
