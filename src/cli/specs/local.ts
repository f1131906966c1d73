/** Specs of the commands that bridge this machine to the service: `listen` and `mcp`. */
import { integer, leaf, required, text } from "../Spec.js"

export const listen = leaf({
  name: "listen",
  summary: "Forward this organization's new deliveries to a local URL",
  description: "Each delivery is POSTed with its exact body and signature headers, so a local handler verifies " +
    "Mailroom-Signature with the account's webhook secret as in production. No public URL is needed.",
  flags: {
    forwardTo: required(text("forward-to", "URL", "the local URL that receives each delivery", { alias: "f" })),
    maxEvents: integer("max-events", "stop after forwarding this many deliveries (default: until Ctrl-C)", { min: 1 })
  },
  args: {},
  examples: ["mailroom listen --forward-to http://localhost:8000/webhooks", "mailroom listen -f http://localhost:8000/webhooks --json"]
})

// --- mcp ---------------------------------------------------------------------------------------

export const mcp = leaf({
  name: "mcp",
  summary: "Serve Mailroom's MCP tools over stdio, with this profile's credential",
  description: "For an MCP client that starts servers as commands (stdio). The tools are the ones of the service's " +
    "`/mcp` endpoint; each call is the API request it names, made with this profile's credential. Runs until stdin closes.",
  flags: {},
  args: {},
  examples: ["mailroom mcp", "MAILROOM_API_KEY=mr_live_… mailroom mcp"]
})
