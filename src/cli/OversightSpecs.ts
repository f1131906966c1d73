/** Command specs of `api-keys` and `drafts`. */
import { SCOPES } from "../contract/Security.js"
import { choice, idArg, leaf, many, required, text } from "./Spec.js"

const ID = "<id>"

export const apiKeysCreate = leaf({
  name: "create",
  summary: "Create an API key with scopes (its secret is shown once)",
  flags: {
    name: required(text("name", "NAME", "what the key is for")),
    scope: many("scope", "SCOPE", `a scope: ${SCOPES.join(", ")} (repeat for several; admin is everything)`)
  },
  args: {},
  examples: ["mailroom api-keys create --name reader --scope emails:read", "mailroom api-keys create --name bot --scope emails:read --scope emails:send"]
})

export const apiKeysList = leaf({
  name: "list",
  summary: "The organization's API keys (never their secrets)",
  flags: {},
  args: {},
  examples: ["mailroom api-keys list", "mailroom api-keys list --json"]
})

export const apiKeysRevoke = leaf({
  name: "revoke",
  summary: "Revoke an API key: it is refused from then on",
  flags: {},
  args: { id: idArg("API key", "mailroom api-keys list") },
  examples: [`mailroom api-keys revoke ${ID}`]
})

export const draftsList = leaf({
  name: "list",
  summary: "Sends held for approval, newest first",
  flags: {
    status: choice("status", ["pending_approval", "approved", "rejected", "expired", "sent", "failed"], "only drafts in this state")
  },
  args: {},
  examples: ["mailroom drafts list", "mailroom drafts list --status pending_approval --json"]
})

export const draftsGet = leaf({
  name: "get",
  summary: "One held send",
  flags: {},
  args: { id: idArg("draft", "mailroom drafts list") },
  examples: [`mailroom drafts get ${ID}`]
})

export const draftsApprove = leaf({
  name: "approve",
  summary: "Approve a held send: it is sent, once",
  flags: {},
  args: { id: idArg("draft", "mailroom drafts list") },
  examples: [`mailroom drafts approve ${ID}`]
})

export const draftsReject = leaf({
  name: "reject",
  summary: "Reject a held send: it is never sent",
  flags: {},
  args: { id: idArg("draft", "mailroom drafts list") },
  examples: [`mailroom drafts reject ${ID}`]
})
