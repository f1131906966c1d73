/**
 * `/llms.txt`: what a language model needs to start using the service, in one Markdown page
 * (llmstxt.org): generated from the OpenAPI document (every operation, grouped, with its summary)
 * and `/auth.md` (sign-up without email, credentials), plus the MCP endpoint and the event stream.
 */
type Operation = { readonly summary?: string; readonly tags?: ReadonlyArray<string>; readonly security?: ReadonlyArray<unknown> }
interface Document {
  readonly info: { readonly title: string; readonly description?: string }
  readonly paths: Readonly<Record<string, Readonly<Record<string, Operation>>>>
  readonly tags?: ReadonlyArray<{ readonly name: string; readonly description?: string }>
  readonly webhooks?: Readonly<Record<string, { readonly post?: { readonly summary?: string } }>>
}

const METHODS = ["get", "post", "put", "patch", "delete"]

/** The operations in document order, grouped by their tag, each `METHOD path: summary`. */
const operations = (doc: Document) => {
  const groups = new Map<string, Array<string>>()
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of METHODS) {
      const op = item[method]
      if (op === undefined) continue
      const tag = op.tags?.[0] ?? "other"
      const lines = groups.get(tag) ?? []
      lines.push(`- \`${method.toUpperCase()} ${path}\`${op.summary !== undefined ? `: ${op.summary}` : ""}${op.security?.length === 0 ? " (no credential)" : ""}`)
      groups.set(tag, lines)
    }
  }
  const described = new Map((doc.tags ?? []).map((t) => [t.name, t.description]))
  return [...groups].map(([tag, lines]) => `### ${tag}${described.get(tag) ? `: ${described.get(tag)}` : ""}\n\n${lines.join("\n")}`).join("\n\n")
}

/** `/auth.md` without its own title: it becomes a section here. */
const authSection = (authMd: string) => authMd.replace(/^# .*\n+/, "").replace(/^## /gm, "### ")

export const llmsTxt = (base: string, doc: Document, authMd: string, tools: ReadonlyArray<{ readonly name: string; readonly description: string }>) => `# ${doc.info.title}

> ${doc.info.description ?? ""}

Base URL: \`${base}/v1\`. Machine-readable: [OpenAPI document](${base}/v1/openapi.json), [discovery](${base}/v1/discovery),
[credentials for agents](${base}/auth.md), [reference](${base}/docs).

## Start: a credential without an email address

\`POST ${base}/v1/agent/accounts\` with \`{"terms_accepted": true}\` answers an API key (\`data.api_key\`, shown once) and a
managed inbox address (\`data.address\`) at once. Send it as \`Authorization: Bearer <api key>\` on every call.

## Model Context Protocol

\`${base}/mcp\` speaks MCP over Streamable HTTP (protocol 2025-06-18, JSON responses, no session) with the same
\`Authorization: Bearer\` credential, limits and idempotency as \`/v1\`. Locally, \`mailroom mcp\` serves the same tools over
stdio with the CLI's credential. Each tool is one operation below; its input is the operation's path and query parameters and
body (plus \`idempotency_key\` on POSTs), its result the operation's response body; a failure is \`isError: true\` with the
error envelope \`{"success": false, "error": {"code", "message"}}\`.

${tools.map((t) => `- \`${t.name}\`: ${t.description}`).join("\n")}

## Events

\`GET ${base}/v1/events\` with \`Accept: text/event-stream\` streams every event of the organization (\`id:\` event id,
\`event:\` type, \`data:\` the webhook payload); reconnect with \`Last-Event-ID\` to resume (72 h), filter with
\`?types=\`. \`GET ${base}/v1/emails/wait\` waits (up to 120 s) for the next matching email. Event types:
${Object.entries(doc.webhooks ?? {}).map(([type, w]) => `\`${type}\` (${w.post?.summary ?? ""})`).join(", ")}; each
payload's schema is in the OpenAPI document's \`webhooks\` section.

## Credentials

${authSection(authMd)}
## Operations

${operations(doc)}
`
