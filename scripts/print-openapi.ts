/** Writes the OpenAPI document derived from the contract; `npm run openapi` refreshes the snapshot. */
import { OpenApi } from "@effect/platform"
import { writeFileSync } from "node:fs"
import { MailroomApi } from "../src/Api.js"

const out = process.argv[2] ?? "test/__snapshots__/openapi.json"
writeFileSync(out, JSON.stringify(OpenApi.fromApi(MailroomApi), null, 2) + "\n")
process.stdout.write(`wrote ${out}\n`)
