/**
 * The workerd side of a function version's process: the binary, the entry module wrapped around
 * the tenant's module, and the Cap'n Proto text config generated for each process.
 */
import { createRequire } from "node:module"

/** The pinned binary of the npm `workerd` package. */
export const workerdBinary = (): string => {
  const require = createRequire(import.meta.url)
  const mod = require("workerd") as { default: string }
  return mod.default
}

/** Must not be later than the binary's own date (workerd 2026-11-17). */
export const COMPATIBILITY_DATE = "2025-09-01"
export const HEAP_LIMIT_MB = 128

export const TENANT_MODULE = "function.js"
const ENTRY_MODULE = "mailroom-entry.js"

/** Binding names the service gives every function; secrets may not take them. */
export const RESERVED_BINDINGS = ["MAILROOM", "MAILROOM_WEBHOOK_SECRET", "SERVICE_WEBHOOK_SECRET", "MEMORY", "ORG_MEMORY"] as const

/** Console output one invocation keeps; the rest is cut (the host adds the marker). */
export const LOG_LIMIT_BYTES = 16 * 1024
/** Response bytes read from a function; the rest is discarded. */
export const RESPONSE_LIMIT_BYTES = 64 * 1024

/**
 * What the entry module answers the host for every event: the function's response (its body cut
 * at RESPONSE_LIMIT_BYTES), or the uncaught exception, and the console output of this invocation.
 */
export interface Envelope {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: string
  readonly error: string | null
  readonly logs: string
  readonly logsCut: boolean
}

/**
 * The entry module: loads the tenant's module (a module without a default `fetch` fails to load,
 * so deployment rejects it), hands it an `env` whose MAILROOM accepts paths, and holds its answer
 * until every `waitUntil` promise has settled, so the host's wall clock covers that work too.
 * One process serves the concurrent invocations of one function version: console output is kept
 * per invocation through AsyncLocalStorage (it follows the invocation's promises, timers and
 * `waitUntil` work), and the host gets one envelope per event, never the raw response.
 * `MAILROOM.fetch` accepts paths (`/v1/…`) and reaches only `/v1`.
 */
const ENTRY_SOURCE = `import { AsyncLocalStorage } from "node:async_hooks";
import * as tenant from "./${TENANT_MODULE}";
const handler = tenant.default;
if (handler === null || (typeof handler !== "object" && typeof handler !== "function") || typeof handler.fetch !== "function") {
  throw new Error("the module's default export has no fetch(request, env) method");
}
const BASE = "https://mailroom.internal/";
const LOG_LIMIT = ${LOG_LIMIT_BYTES};
const BODY_LIMIT = ${RESPONSE_LIMIT_BYTES};
const current = new AsyncLocalStorage();
const encoder = new TextEncoder();
const show = (v) => {
  if (typeof v === "string") return v;
  if (v instanceof Error) return v.stack ? String(v.stack) : String(v);
  if (v === undefined || typeof v === "function" || typeof v === "symbol" || typeof v === "bigint") return String(v);
  try { return JSON.stringify(v) ?? String(v); } catch { return String(v); }
};
for (const level of ["log", "info", "warn", "error", "debug", "trace"]) {
  const original = console[level];
  console[level] = function(...args) {
    const out = current.getStore();
    if (out === undefined) return original.apply(console, args);
    if (out.cut) return;
    const line = encoder.encode(args.map(show).join(" ") + "\\n");
    const room = LOG_LIMIT - out.size;
    if (line.length > room) { out.parts.push(line.subarray(0, room)); out.size = LOG_LIMIT; out.cut = true; return; }
    out.parts.push(line);
    out.size += line.length;
  };
}
const text = (parts) => {
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { all.set(p, at); at += p.length; }
  return new TextDecoder().decode(all);
};
const readBody = async (response) => {
  if (response.body === null) return "";
  const reader = response.body.getReader();
  const parts = [];
  let size = 0;
  while (size < BODY_LIMIT) {
    const { done, value } = await reader.read();
    if (done) return text(parts);
    const chunk = value instanceof Uint8Array ? value : new Uint8Array(value);
    parts.push(chunk.subarray(0, BODY_LIMIT - size));
    size += chunk.length;
  }
  reader.cancel().catch(() => undefined);
  return text(parts);
};
const invoke = async (request, env, ctx, out) => {
  const service = env.MAILROOM;
  const tenantEnv = { ...env };
  tenantEnv.MAILROOM = Object.freeze({
    fetch(input, init) {
      const req = input instanceof Request ? new Request(new URL(new URL(input.url).pathname + new URL(input.url).search, BASE), input) : new Request(new URL(String(input), BASE), init);
      const path = new URL(req.url).pathname;
      if (path !== "/v1" && !path.startsWith("/v1/")) return Promise.reject(new TypeError("MAILROOM.fetch reaches only /v1/… paths"));
      return service.fetch(req);
    }
  });
  const pending = new Set();
  const wrappedCtx = {
    waitUntil(p) {
      const settled = Promise.resolve(p).then(() => undefined, (e) => { console.error("waitUntil promise rejected:", e && e.stack || String(e)); });
      pending.add(settled);
      settled.finally(() => pending.delete(settled));
    },
    passThroughOnException() {},
    get props() { return ctx.props; }
  };
  let answer;
  try {
    const response = await handler.fetch(request, tenantEnv, wrappedCtx);
    if (!(response instanceof Response)) throw new TypeError("fetch() must return a Response, got " + (response === null ? "null" : typeof response));
    const headers = {};
    for (const [k, v] of response.headers) headers[k] = headers[k] === undefined ? v : headers[k] + ", " + v;
    answer = { status: response.status, headers, body: await readBody(response), error: null };
  } catch (e) {
    answer = { status: 500, headers: {}, body: "", error: e && e.stack ? String(e.stack) : String(e) };
  }
  while (pending.size > 0) await Promise.all([...pending]);
  return answer;
};
export default {
  async fetch(request, env, ctx) {
    const out = { parts: [], size: 0, cut: false };
    const answer = await current.run(out, () => invoke(request, env, ctx, out));
    return new Response(JSON.stringify({ ...answer, logs: text(out.parts), logsCut: out.cut }), { headers: { "content-type": "application/json" } });
  }
};
`

/**
 * The MAILROOM binding's own worker, between every function and the service: only /v1 goes
 * through (the URL as workerd normalized it: dot segments, encoded or not, are resolved first). A
 * function that reaches the raw binding (import { env } from "cloudflare:workers") meets it too.
 */
const GATE_SOURCE = `export default {
  async fetch(request, env) {
    const path = new URL(request.url).pathname;
    if (path !== "/v1" && !path.startsWith("/v1/")) {
      return new Response(JSON.stringify({ success: false, error: { code: "not_found", message: "MAILROOM reaches only /v1 paths" } }), {
        status: 404, headers: { "content-type": "application/json" }
      });
    }
    return env.upstream.fetch(request);
  }
};
`

/** Cap'n Proto text string: `"` and `\\` escaped, every non-printable byte as `\\xNN`. */
export const capnpString = (s: string): string => {
  let out = "\""
  for (const b of Buffer.from(s, "utf8")) {
    if (b === 0x22) out += "\\\""
    else if (b === 0x5c) out += "\\\\"
    else if (b < 0x20 || b >= 0x7f) out += `\\x${b.toString(16).padStart(2, "0")}`
    else out += String.fromCharCode(b)
  }
  return out + "\""
}

export interface ConfigInput {
  readonly code: string
  /** Secret binding names; the values come from the child's environment (`FN_SECRET_<i>`). */
  readonly secretNames: ReadonlyArray<string>
  /** The unix socket the host posts the event to. */
  readonly invokeSocket: string
  /** The host's memory socket and its socket in front of the service's `/v1` (the MAILROOM binding). */
  readonly memorySocket: string
  readonly serviceSocket: string
  /**
   * Identifies this process to both sockets: the host answers only while the process runs an
   * invocation, as the function whose version it serves. workerd sets it on every request itself.
   */
  readonly processToken: string
  /** Development only (`FUNCTION_ALLOW_PRIVATE_NETWORK`): loopback and private addresses reachable too. */
  readonly allowPrivateNetwork?: boolean
}

/** The header workerd sets on every memory and MAILROOM request: the process's token. */
export const PROCESS_HEADER = "x-mailroom-process"

export const secretEnvName = (i: number) => `FN_SECRET_${i}`
export const WEBHOOK_SECRET_ENV = "FN_WEBHOOK_SECRET"

const header = (name: string, value: string) => `(name = ${capnpString(name)}, value = ${capnpString(value)})`

/**
 * The config of one process: the entry and tenant modules inline, secrets from the environment,
 * outbound network to public addresses only, KV namespaces and the MAILROOM service through the
 * host's unix sockets with an identifying header workerd sets on every request (replacing any
 * header of the same name the tenant sent), the event socket on a unix path, and the heap cap.
 */
export const buildConfig = (c: ConfigInput): string => {
  const bindings = [
    ...c.secretNames.map((name, i) => `(name = ${capnpString(name)}, fromEnvironment = ${capnpString(secretEnvName(i))})`),
    `(name = "MAILROOM_WEBHOOK_SECRET", fromEnvironment = ${capnpString(WEBHOOK_SECRET_ENV)})`,
    `(name = "SERVICE_WEBHOOK_SECRET", fromEnvironment = ${capnpString(WEBHOOK_SECRET_ENV)})`,
    `(name = "MEMORY", kvNamespace = "kv-function")`,
    `(name = "ORG_MEMORY", kvNamespace = "kv-org")`,
    // Nothing internal is bound to the tenant's worker: everything in its env is meant for it.
    `(name = "MAILROOM", service = "mailroom-gate")`
  ]
  const kv = (name: string, scope: string) =>
    `(name = "${name}", external = (address = ${capnpString(`unix:${c.memorySocket}`)}, http = (injectRequestHeaders = [` +
    `${header(PROCESS_HEADER, c.processToken)}, ${header("x-mailroom-scope", scope)}])))`
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = (
      modules = [
        (name = ${capnpString(ENTRY_MODULE)}, esModule = ${capnpString(ENTRY_SOURCE)}),
        (name = ${capnpString(TENANT_MODULE)}, esModule = ${capnpString(c.code)})
      ],
      compatibilityDate = ${capnpString(COMPATIBILITY_DATE)},
      compatibilityFlags = ["nodejs_als"],
      bindings = [${bindings.join(", ")}],
      globalOutbound = "public-only"
    )),
    (name = "public-only", network = (${c.allowPrivateNetwork === true
      ? `allow = ["public", "private", "local"], deny = ["unix", "unix-abstract"]`
      : `allow = ["public"], deny = ["local", "private", "unix", "unix-abstract"]`},
      tlsOptions = (trustBrowserCas = true))),
    (name = "mailroom-gate", worker = (
      modules = [(name = "gate.js", esModule = ${capnpString(GATE_SOURCE)})],
      compatibilityDate = ${capnpString(COMPATIBILITY_DATE)},
      bindings = [(name = "upstream", service = "mailroom")]
    )),
    ${kv("kv-function", "function")},
    ${kv("kv-org", "org")},
    (name = "mailroom", external = (address = ${capnpString(`unix:${c.serviceSocket}`)}, http = (injectRequestHeaders = [` +
    `${header(PROCESS_HEADER, c.processToken)}])))
  ],
  sockets = [(name = "invoke", address = ${capnpString(`unix:${c.invokeSocket}`)}, http = (), service = "main")],
  v8Flags = ["--max-old-space-size=${HEAP_LIMIT_MB}"]
);
`
}
