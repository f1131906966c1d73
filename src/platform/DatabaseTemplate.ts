/**
 * Where the embedded database's initial files are kept between `npm install` and a first start: a
 * fresh PGlite data directory dumped as a gzip tarball (scripts/build-db-template.ts), in
 * node_modules/.cache/mailroom/, named after the PGlite version that made it, so another version
 * never unpacks it. A first start that finds it unpacks it instead of running initdb: initdb in
 * WebAssembly peaks at ~820 MB of RSS, unpacking at ~380 MB.
 */
import { existsSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"

/** The PGlite package's directory and version (its package.json is not exported: found by walking up). */
const pglitePackage = () => {
  let dir = dirname(createRequire(import.meta.url).resolve("@electric-sql/pglite"))
  for (;;) {
    const file = join(dir, "package.json")
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, "utf8")) as { name?: string; version?: string }
      if (pkg.name === "@electric-sql/pglite") return { dir, version: pkg.version ?? "unknown" }
    }
    const up = dirname(dir)
    if (up === dir) throw new Error("cannot find @electric-sql/pglite's package.json")
    dir = up
  }
}

export const databaseTemplatePath = (): string => {
  const { dir, version } = pglitePackage()
  // <node_modules>/@electric-sql/pglite → <node_modules>/.cache/mailroom
  return join(dir, "..", "..", ".cache", "mailroom", `pglite-${version}.tar.gz`)
}
