/** `functions deploy|list|get|delete|invoke|logs`, `memories list|get|set|delete`, `templates list|show|install`. */
import { Console, Effect, Option } from "effect"
import { readFileSync } from "node:fs"
import type { FunctionInfo, Invocation } from "../../functions/Api.js"
import type { MemoryKeyInfo } from "../../memories/Api.js"
import type { Template } from "../../templates/Api.js"
import { CliFailure } from "../Failure.js"
import { col, done, printJson, showList, showOne } from "../Output.js"
import { anonymousClient, authedClient, target } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams } from "./common.js"

const readText = (file: string, what: string) =>
  Effect.try({
    try: () => readFileSync(file, "utf8"),
    catch: (e) => new CliFailure({ message: `cannot read ${what} ${file}: ${(e as Error).message}` })
  })

const SECRET = /^([A-Z][A-Z0-9_]{0,63})=([\s\S]*)$/

/** `NAME=VALUE` pairs; `NAME=` (nothing after) removes the secret on a redeploy. */
const parseSecrets = (pairs: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const secrets: Record<string, string | null> = {}
    for (const pair of pairs) {
      const m = SECRET.exec(pair)
      if (m === null) {
        return yield* new CliFailure({
          message: `--secret: "${pair.split("=")[0]}" is not NAME=VALUE with NAME like OPENAI_KEY (A-Z, 0-9, _; a letter first)`,
          usage: true
        })
      }
      secrets[m[1]!] = m[2] === "" ? null : m[2]!
    }
    return secrets
  })

const functionColumns = [
  col<FunctionInfo>("id", (f) => f.id),
  col<FunctionInfo>("name", (f) => f.name),
  col<FunctionInfo>("version", (f) => f.version),
  col<FunctionInfo>("size", (f) => `${f.code_size_bytes} B`),
  col<FunctionInfo>("secrets", (f) => f.secret_names.join(",") || "-"),
  col<FunctionInfo>("endpoint", (f) => f.endpoint_id ?? "-"),
  col<FunctionInfo>("deployed", (f) => f.deployed_at)
]

export const deploy: Handler<typeof S.functionsDeploy> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const code = yield* readText(o.file, "the module")
    const secrets = yield* parseSecrets(o.secret)
    if (o.fallback && Option.isSome(o.route)) {
      return yield* new CliFailure({ message: "give --fallback or --route, not both", usage: true })
    }
    const wantsEndpoint = o.endpoint || o.fallback || Option.isSome(o.route)
    const all = yield* fetchPages(
      { limit: Option.some(100), cursor: Option.none(), all: true },
      (cursor) => client.functions.list({ urlParams: pageParams(Option.some(100), cursor) })
    )
    const existing = all.items.find((f) => f.name === o.name)
    let fn: FunctionInfo
    if (existing === undefined) {
      // One request: the function, its endpoint and its route are made together or not at all.
      const set = Object.fromEntries(Object.entries(secrets).filter((e): e is [string, string] => e[1] !== null))
      fn = yield* client.functions.create({
        payload: {
          name: o.name,
          code,
          ...(Object.keys(set).length > 0 ? { secrets: set } : {}),
          ...(wantsEndpoint ? { endpoint: { is_route_target: !o.fallback } } : {}),
          ...Option.match(o.route, { onNone: () => ({}), onSome: (pattern) => ({ route: { pattern } }) })
        },
        headers: {}
      })
    } else {
      fn = yield* client.functions.update({
        path: { id: existing.id },
        payload: { code, ...(Object.keys(secrets).length > 0 ? { secrets } : {}) }
      })
      if (Option.isSome(o.route)) {
        // The route makes the function's endpoint (a route target) when it has none.
        yield* client.routes.create({ payload: { pattern: o.route.value, function_id: fn.id }, headers: {} })
        fn = yield* client.functions.get({ path: { id: fn.id } })
      } else if (wantsEndpoint && fn.endpoint_id === null) {
        const endpoint = yield* client.endpoints.create({
          payload: { kind: "function", function_id: fn.id, is_route_target: !o.fallback },
          headers: {}
        })
        fn = { ...fn, endpoint_id: endpoint.id }
      }
    }
    const { code: _code, ...shown } = fn as FunctionInfo & { code?: string }
    yield* done(
      target.json,
      `${existing === undefined ? "Deployed" : "Redeployed"} ${fn.name} (version ${fn.version}, id ${fn.id})` +
        (fn.endpoint_id === null
          ? "; no endpoint yet (--route PATTERN, --endpoint or --fallback)"
          : `; endpoint ${fn.endpoint_id}${Option.isSome(o.route) ? `, mail to ${o.route.value} routed to it` : ""}`),
      shown
    )
  })

export const list: Handler<typeof S.functionsList> = (p) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(p, (cursor) => client.functions.list({ urlParams: pageParams(p.limit, cursor) }))
    yield* showList(target.json, page, functionColumns)
  })

export const get: Handler<typeof S.functionsGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const fn = yield* client.functions.get({ path: { id: o.id } })
    if (o.code) return yield* Effect.async<void>((resume) => {
      process.stdout.write(fn.code, () => resume(Effect.void))
    })
    if (target.json) return yield* printJson(fn)
    const { code, ...rest } = fn
    yield* showOne(false, { ...rest, secret_names: rest.secret_names.join(", ") || "-", code: `${code.length} characters (--code prints it)` })
  })

export const remove: Handler<typeof S.functionsDelete> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const fn = yield* client.functions.remove({ path: { id: o.id } })
    yield* done(target.json, `Deleted ${fn.name} (${fn.id}), its endpoint, routes and memories`, fn)
  })

export const invoke: Handler<typeof S.functionsInvoke> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const event = yield* Option.match(o.event, {
      onNone: () => Effect.succeed(undefined),
      onSome: (file) =>
        Effect.flatMap(readText(file, "the event"), (text) =>
          Effect.try({
            try: () => JSON.parse(text) as unknown,
            catch: () => new CliFailure({ message: `--event: ${file} is not JSON`, usage: true })
          }).pipe(Effect.filterOrFail(
            (v): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v),
            () => new CliFailure({ message: `--event: ${file} must hold a JSON object (the event payload)`, usage: true })
          )))
    })
    const result = yield* client.functions.invoke({
      path: { id: o.id },
      payload: event === undefined ? {} : { event },
      headers: {}
    })
    if (target.json) yield* printJson(result)
    else {
      yield* Console.log(`${result.status}${result.status_code === null ? "" : ` (HTTP ${result.status_code})`} in ${result.duration_ms} ms`)
      if (result.error !== null) yield* Console.log(`error: ${result.error}`)
      if (result.response_body !== "") yield* Console.log(`response: ${result.response_body}`)
      if (result.logs !== "") yield* Console.log(`logs:\n${result.logs.replace(/\n$/, "")}`)
    }
    if (result.status !== "ok") return yield* new CliFailure({ message: `the function did not answer 2xx: ${result.status}` })
  })

const showInvocation = (json: boolean, i: Invocation) =>
  json
    ? Console.log(JSON.stringify(i))
    : Console.log(
      `${i.started_at.toISOString()}  ${i.status.padEnd(16)} ${String(i.duration_ms).padStart(6)} ms  ` +
        `${i.event ?? "-"}${i.delivery_id === null ? " (invoke)" : ` delivery ${i.delivery_id}`}` +
        (i.error === null ? "" : `\n  error: ${i.error}`) +
        (i.logs === "" ? "" : `\n${i.logs.replace(/\n$/, "").split("\n").map((l) => `  | ${l}`).join("\n")}`)
    )

const FOLLOW_EVERY = "2 seconds"

export const logs: Handler<typeof S.functionsLogs> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const limit = Option.getOrElse(o.limit, () => 20)
    const recent = yield* client.functions.invocations({ path: { id: o.id }, urlParams: { limit } })
    // Oldest first, as a log reads; with --json one object per line (so --follow streams).
    const seen = new Set<string>()
    for (const i of [...recent.items].reverse()) {
      seen.add(i.id)
      yield* showInvocation(target.json, i)
    }
    if (!o.follow) return
    if (!target.json) yield* Console.error("Following new invocations (Ctrl-C ends)…")
    while (true) {
      yield* Effect.sleep(FOLLOW_EVERY)
      const page = yield* client.functions.invocations({ path: { id: o.id }, urlParams: { limit: 100 } })
      for (const i of [...page.items].reverse()) {
        if (seen.has(i.id)) continue
        seen.add(i.id)
        yield* showInvocation(target.json, i)
      }
    }
  })

// --- memories ----------------------------------------------------------------------------------

/** Keys travel percent-encoded in the path (a key may hold `/`, `?` or spaces). */
const keyPath = (key: string) => encodeURIComponent(key)

const keyColumns = [
  col<MemoryKeyInfo>("key", (k) => k.key),
  col<MemoryKeyInfo>("size", (k) => `${k.size_bytes} B`),
  col<MemoryKeyInfo>("expires", (k) => k.expires_at),
  col<MemoryKeyInfo>("updated", (k) => k.updated_at)
]

export const memoriesList: Handler<typeof S.memoriesList> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const urlParams = { ...opt("prefix", o.prefix), ...opt("limit", o.limit), ...opt("cursor", o.cursor) }
    const page = yield* Option.match(o.function, {
      onNone: () => client.memories.list({ urlParams }),
      onSome: (id) => client.memories.listFunction({ path: { id }, urlParams })
    })
    yield* showList(target.json, page, keyColumns)
  })

export const memoriesGet: Handler<typeof S.memoriesGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const item = yield* Option.match(o.function, {
      onNone: () => client.memories.get({ path: { key: keyPath(o.key) } }),
      onSome: (id) => client.memories.getFunction({ path: { id, key: keyPath(o.key) } })
    })
    yield* target.json ? printJson(item) : Console.log(JSON.stringify(item.value, null, 2))
  })

export const memoriesSet: Handler<typeof S.memoriesSet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    let value: unknown
    try {
      value = JSON.parse(o.value)
    } catch {
      value = o.value
    }
    const payload = { value, ...opt("ttl_seconds", o.ttl) }
    const item = yield* Option.match(o.function, {
      onNone: () => client.memories.put({ path: { key: keyPath(o.key) }, payload }),
      onSome: (id) => client.memories.putFunction({ path: { id, key: keyPath(o.key) }, payload })
    })
    yield* done(target.json, `Stored ${o.key} (${item.size_bytes} bytes${item.expires_at === null ? "" : `, expires ${item.expires_at.toISOString()}`})`, item)
  })

export const memoriesDelete: Handler<typeof S.memoriesDelete> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const item = yield* Option.match(o.function, {
      onNone: () => client.memories.remove({ path: { key: keyPath(o.key) } }),
      onSome: (id) => client.memories.removeFunction({ path: { id, key: keyPath(o.key) } })
    })
    yield* done(target.json, `Deleted ${o.key}`, item)
  })

// --- templates ---------------------------------------------------------------------------------

const templateColumns = [
  col<Template>("slug", (t) => t.slug),
  col<Template>("name", (t) => t.name),
  col<Template>("secrets", (t) => [...t.required_secrets, ...t.optional_secrets.map((s) => `[${s}]`)].join(" ") || "-"),
  col<Template>("events", (t) => t.event_types.join(","))
]

export const templatesList: Handler<typeof S.templatesList> = () =>
  Effect.gen(function*() {
    const t = yield* target
    const client = yield* anonymousClient(t)
    yield* showList(t.json, yield* client.templates.list(), templateColumns)
  })

export const templatesShow: Handler<typeof S.templatesShow> = (o) =>
  Effect.gen(function*() {
    const t = yield* target
    const client = yield* anonymousClient(t)
    const template = yield* client.templates.get({ path: { slug: o.slug } })
    if (o.code) return yield* Effect.async<void>((resume) => {
      process.stdout.write(template.code, () => resume(Effect.void))
    })
    if (t.json) return yield* printJson(template)
    yield* Console.log(template.readme.trimEnd())
    yield* Console.log([
      "",
      `version ${template.version}; events ${template.event_types.join(", ")}`,
      `required secrets: ${template.required_secrets.join(", ") || "none"}; optional: ${template.optional_secrets.join(", ") || "none"}`,
      `install: mailroom templates install ${template.slug}${template.required_secrets.map((s) => ` --secret ${s}=…`).join("")}`
    ].join("\n"))
  })

export const templatesInstall: Handler<typeof S.templatesInstall> = (o) =>
  Effect.gen(function*() {
    const { client, target: t } = yield* authedClient
    const secrets = yield* parseSecrets(o.secret)
    const set = Object.fromEntries(Object.entries(secrets).filter((e): e is [string, string] => e[1] !== null))
    const installed = yield* client.templates.install({
      path: { slug: o.slug },
      payload: {
        ...opt("name", o.name),
        ...(Object.keys(set).length > 0 ? { secrets: set } : {}),
        ...Option.match(o.route, { onNone: () => ({}), onSome: (pattern) => ({ route: { pattern } }) })
      },
      headers: {}
    })
    yield* done(
      t.json,
      `Installed ${o.slug} as ${installed.function.name} (function ${installed.function.id}, endpoint ${installed.endpoint.id}` +
        (installed.route === null ? ", organization-wide)" : `, route ${installed.route.pattern})`),
      installed
    )
  })
