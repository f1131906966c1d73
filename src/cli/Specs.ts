/**
 * Every command's flags, arguments, help and examples, one module per area under specs/ (the
 * handlers are in commands/, loaded on use). Plain data on purpose: the parser and the help renderer
 * read it without loading Effect or the API contract, so the flags are written out rather than derived
 * from the contract's schemas (their wording, names and placeholders are the CLI's own anyway).
 */
export * from "./specs/credentials.js"
export * from "./specs/account.js"
export * from "./specs/resources.js"
export * from "./specs/inboxes.js"
export * from "./specs/mail.js"
export * from "./specs/payments.js"
export * from "./specs/local.js"
export * from "./specs/functions.js"
export * from "./specs/registries.js"
export * from "./specs/wake.js"
export * from "./specs/demo.js"
export * from "./specs/conversations.js"
export * from "./specs/sending.js"
