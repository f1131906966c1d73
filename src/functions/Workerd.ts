/**
 * The workerd side of one invocation: the binary, the entry module wrapped around the tenant's
 * module, and the Cap'n Proto text config generated for each process.
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

/** The response header the entry module sets (with this invocation's nonce) on an uncaught exception. */
export const ERROR_HEADER = "x-mailroom-function-error"
/** The request header carrying that nonce to the entry module (removed before the tenant sees the request). */
export const NONCE_HEADER = "x-mailroom-invocation-nonce"

/**
 * The entry module: loads the tenant's module (a module without a default `fetch` fails to load,
 * so deployment rejects it), hands it an `env` whose MAILROOM accepts paths, answers an uncaught
 * exception with a response marked by a nonce the tenant never sees, and holds the response until
 * every `waitUntil` promise has settled, so the host's wall clock covers that work too.
 * `MAILROOM.fetch` accepts paths (`/v1/…`) and reaches only `/v1`.
 */
const ENTRY_SOURCE = `import * as tenant from "./${TENANT_MODULE}";
const handler = tenant.default;
if (handler === null || (typeof handler !== "object" && typeof handler !== "function") || typeof handler.fetch !== "function") {
  throw new Error("the module's default export has no fetch(request, env) method");
}
const BASE = "https://mailroom.internal/";
const NONCE = "${NONCE_HEADER}";
export default {
  async fetch(request, env, ctx) {
    // The nonce arrives with the event and never reaches the tenant: its request is a copy without it.
    const nonce = request.headers.get(NONCE);
    const headers = new Headers(request.headers);
    headers.delete(NONCE);
    const event = new Request(request, { headers });
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
    let response;
    try {
      response = await handler.fetch(event, tenantEnv, wrappedCtx);
      if (!(response instanceof Response)) throw new TypeError("fetch() must return a Response, got " + (response === null ? "null" : typeof response));
    } catch (e) {
      const text = e && e.stack ? String(e.stack) : String(e);
      response = new Response(text, { status: 500, headers: { "${ERROR_HEADER}": nonce } });
    }
    while (pending.size > 0) await Promise.all([...pending]);
    return response;
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
  /** The host's memory socket and the token identifying this invocation to it. */
  readonly memorySocket: string
  readonly invocationToken: string
  /** The service's own HTTP address (`host:port`) and this invocation's bearer credential. */
  readonly serviceAddress: string
  readonly serviceCredential: string
  /** Development only (`FUNCTION_ALLOW_PRIVATE_NETWORK`): loopback and private addresses reachable too. */
  readonly allowPrivateNetwork?: boolean
}

export const secretEnvName = (i: number) => `FN_SECRET_${i}`
export const WEBHOOK_SECRET_ENV = "FN_WEBHOOK_SECRET"

const header = (name: string, value: string) => `(name = ${capnpString(name)}, value = ${capnpString(value)})`

/**
 * The config of one process: the entry and tenant modules inline, secrets from the environment,
 * outbound network to public addresses only, KV namespaces and the MAILROOM service through
 * external services whose identifying headers workerd sets on every request (replacing any header
 * of the same name the tenant sent), the event socket on a unix path, and the heap cap.
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
    `${header("x-mailroom-invocation", c.invocationToken)}, ${header("x-mailroom-scope", scope)}])))`
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = (
      modules = [
        (name = ${capnpString(ENTRY_MODULE)}, esModule = ${capnpString(ENTRY_SOURCE)}),
        (name = ${capnpString(TENANT_MODULE)}, esModule = ${capnpString(c.code)})
      ],
      compatibilityDate = ${capnpString(COMPATIBILITY_DATE)},
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
    (name = "mailroom", external = (address = ${capnpString(c.serviceAddress)}, http = (injectRequestHeaders = [` +
    `${header("authorization", `Bearer ${c.serviceCredential}`)}])))
  ],
  sockets = [(name = "invoke", address = ${capnpString(`unix:${c.invokeSocket}`)}, http = (), service = "main")],
  v8Flags = ["--max-old-space-size=${HEAP_LIMIT_MB}"]
);
`
}
