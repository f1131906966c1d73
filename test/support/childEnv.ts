/**
 * The environment of a service process a test starts: this process's, without what belongs to the
 * test runner (vitest's and npm's variables, NODE_OPTIONS) or chooses its database (DATABASE_URL),
 * then `env` on top.
 */
export const childEnv = (env: Record<string, string>) => {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && k !== "DATABASE_URL" && !k.startsWith("VITEST") && k !== "NODE_OPTIONS" && !k.startsWith("npm_")) {
      out[k] = v
    }
  }
  return { ...out, ...env }
}
