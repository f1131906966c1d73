/** Specs of `registries`: public directories of agents and their addresses. */
import { choice, flag, leaf, required, text, textArg } from "../Spec.js"
import { paging } from "./shared.js"

const registryName = textArg("name", "the registry's name (3-64 of a-z, 0-9 and -), or its id")
const handleArg = textArg("handle", "the entry's handle in the registry")
const policy = choice("policy", ["owner_only", "request", "open"], "who may publish: only you, anyone after your approval, anyone", {
  field: "publish_policy"
})
const entryFields = {
  description: text("description", "TEXT", "what the agent does (at most 500 characters)"),
  capabilities: text("capabilities", "LIST", "comma-separated capabilities, e.g. invoices.read,invoices.pay"),
  metadata: text("metadata", "JSON", "a JSON object, e.g. '{\"model\":\"x\"}' (at most 8 KiB)")
}

export const registriesCreate = leaf({
  name: "create",
  summary: "Create a registry (its name is unique across the service)",
  flags: { description: text("description", "TEXT", "what the registry lists"), policy },
  args: { name: textArg("name", "the registry's name (3-64 of a-z, 0-9 and -)") },
  examples: ["mailroom registries create acme-agents", "mailroom registries create acme-partners --policy request"]
})

export const registriesList = leaf({
  name: "list",
  summary: "Registries, newest first",
  flags: { ...paging, owned: flag("owned", "only the registries this organization owns") },
  args: {},
  examples: ["mailroom registries list", "mailroom registries list --owned --json"]
})

export const registriesShow = leaf({
  name: "show",
  summary: "One registry",
  flags: {},
  args: { name: registryName },
  examples: ["mailroom registries show acme-agents"]
})

export const registriesUpdate = leaf({
  name: "update",
  summary: "Change a registry's description or publish policy (owner only)",
  flags: { description: text("description", "TEXT|none", "the new description, or `none` to clear it"), policy },
  args: { name: registryName },
  examples: ["mailroom registries update acme-agents --policy open"]
})

export const registriesDelete = leaf({
  name: "delete",
  summary: "Delete a registry and every entry in it (owner only)",
  flags: {},
  args: { name: registryName },
  examples: ["mailroom registries delete acme-agents"]
})

export const registriesPublish = leaf({
  name: "publish",
  summary: "Publish an agent under a handle",
  description: "The address must be one this organization can send from: its managed inbox (or a +tag form) or an " +
    "address at one of its verified domains. In a `request` registry of another organization the entry stays " +
    "pending until the owner approves it.",
  flags: {
    handle: required(text("handle", "HANDLE", "1-64 of a-z, 0-9, '.', '_' and '-', unique in the registry")),
    address: required(text("address", "ADDRESS", "the agent's address")),
    ...entryFields
  },
  args: { name: registryName },
  examples: [
    "mailroom registries publish acme-agents --handle bill --address b@acme.com",
    "mailroom registries publish acme --handle desk --address d@acme.com --json"
  ]
})

export const registriesEntries = leaf({
  name: "entries",
  summary: "A registry's entries, newest first (pending ones too for the owner)",
  flags: { ...paging, status: choice("status", ["pending", "published"], "only entries in this state") },
  args: { name: registryName },
  examples: ["mailroom registries entries acme-agents", "mailroom registries entries acme-agents --status pending"]
})

export const registriesEntry = leaf({
  name: "entry",
  summary: "Resolve a handle: one entry with its address",
  flags: {},
  args: { name: registryName, handle: handleArg },
  examples: ["mailroom registries entry acme-agents billing", "mailroom registries entry acme-agents billing --json"]
})

export const registriesUnpublish = leaf({
  name: "unpublish",
  summary: "Remove an entry (its publisher or the registry's owner)",
  flags: {},
  args: { name: registryName, handle: handleArg },
  examples: ["mailroom registries unpublish acme-agents billing"]
})

export const registriesApprove = leaf({
  name: "approve",
  summary: "Publish a pending entry of your registry",
  flags: {},
  args: { name: registryName, handle: handleArg },
  examples: ["mailroom registries approve acme-partners their-agent"]
})

export const registriesReject = leaf({
  name: "reject",
  summary: "Refuse a pending entry of your registry (it is removed, its handle freed)",
  flags: {},
  args: { name: registryName, handle: handleArg },
  examples: ["mailroom registries reject acme-partners their-agent"]
})
