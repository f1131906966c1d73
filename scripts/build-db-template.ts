/**
 * Run by `npm install` (the `prepare` script): the embedded database's initial files as a tarball,
 * so the service's first start unpacks them instead of running initdb (src/platform/DatabaseTemplate.ts).
 * Does nothing when the file for this PGlite version exists.
 */
import { PGlite } from "@electric-sql/pglite"
import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs"
import { dirname } from "node:path"
import { databaseTemplatePath } from "../src/platform/DatabaseTemplate.js"

const file = databaseTemplatePath()
if (!existsSync(file)) {
  const db = await PGlite.create("memory://")
  const dump = await db.dumpDataDir("gzip")
  await db.close()
  mkdirSync(dirname(file), { recursive: true })
  const partial = `${file}.${process.pid}.partial`
  writeFileSync(partial, Buffer.from(await dump.arrayBuffer()))
  renameSync(partial, file)
  console.log(`built ${file}`)
}
