/** Specs of `inboxes`: the organization's addresses on the managed domain. */
import { flag, idArg, leaf, text } from "../Spec.js"
import { ID, paging } from "./shared.js"

const username = text("username", "NAME", "the local part on the managed domain (letters, digits, '.', '_', '-')")
const displayName = text("display-name", "NAME", "the inbox's display name", { field: "display_name" })

export const inboxesList = leaf({
  name: "list",
  summary: "The organization's inboxes (the default one included), newest first",
  flags: paging,
  args: {},
  examples: ["mailroom inboxes list"]
})

export const inboxesCreate = leaf({
  name: "create",
  summary: "Create an inbox on the managed domain (random username when none is given)",
  description: "Mail to the new address and its +tag forms is stored with the inbox's id; send-mail can use it as " +
    "`from`. Each plan allows `limits.inboxes_max` inboxes, the default one included (`mailroom account`).",
  flags: { username, displayName },
  args: {},
  examples: ["mailroom inboxes create --username support --display-name 'Support'", "mailroom inboxes create"]
})

export const inboxesGet = leaf({
  name: "get",
  summary: "Show one inbox",
  flags: {},
  args: { id: idArg("inbox", "mailroom inboxes list") },
  examples: [`mailroom inboxes get ${ID}`]
})

export const inboxesRename = leaf({
  name: "rename",
  summary: "Change an inbox's username and/or display name",
  description: "A new username changes the address (not for the default inbox, nor while routes use the inbox).",
  flags: {
    username,
    displayName,
    clearDisplayName: flag("clear-display-name", "remove the display name")
  },
  args: { id: idArg("inbox", "mailroom inboxes list") },
  examples: [`mailroom inboxes rename ${ID} --username sales`, `mailroom inboxes rename ${ID} --display-name 'Sales team'`]
})

export const inboxesDelete = leaf({
  name: "delete",
  summary: "Delete an inbox (not the default one, nor one that routes use); its mail stays",
  flags: {},
  args: { id: idArg("inbox", "mailroom inboxes list") },
  examples: [`mailroom inboxes delete ${ID}`]
})
