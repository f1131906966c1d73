/** Specs of `account` and `secret`: the organization's settings, storage and webhook signing secret. */
import { choice, leaf, onOff, text } from "../Spec.js"

export const accountShow = leaf({
  name: "show",
  summary: "Plan, limits, entitlements and settings",
  flags: {},
  args: {},
  examples: ["mailroom account show --json"]
})

export const accountUpdate = leaf({
  name: "update",
  summary: "Change account settings",
  flags: {
    spamThreshold: text("spam-threshold", "N|none", "reject mail scoring at least this (0 to 15), or `none` to turn it off", {
      field: "spam_threshold"
    }),
    discardContent: onOff("discard-content", "drop stored content once a delivery is confirmed", {
      field: "discard_content_on_webhook_confirmed"
    }),
    sendApproval: choice("send-approval", ["none", "new_recipients", "all"], "which sends wait for approval (mailroom drafts)", {
      field: "send_approval"
    })
  },
  args: {},
  examples: ["mailroom account update --spam-threshold 6", "mailroom account update --discard-content true"]
})

export const accountStorage = leaf({
  name: "storage",
  summary: "Storage used (mail and memories) against the plan's quota",
  flags: {},
  args: {},
  examples: ["mailroom account storage"]
})

export const secretShow = leaf({
  name: "show",
  summary: "The webhook signing secret (created on first read)",
  flags: {},
  args: {},
  examples: ["mailroom secret show", "mailroom secret show --json"]
})

export const secretRotate = leaf({
  name: "rotate",
  summary: "Replace the webhook secret; the old one stops working at once",
  description: "Allowed once per hour.",
  flags: {},
  args: {},
  examples: ["mailroom secret rotate"]
})
