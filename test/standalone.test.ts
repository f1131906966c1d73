/**
 * The repository stands alone: its docs, the served OpenAPI document and `/docs` are the reference.
 * No tracked file may point at documents outside it (a specification or contract file, a shared
 * folder next to the checkout) or at tracker items by number; comments describe the behaviour.
 */
import { describe, expect, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"

const ROOT = new URL("../", import.meta.url).pathname

// Spelled in pieces, so this file does not match itself.
const FORBIDDEN: ReadonlyArray<readonly [string, RegExp]> = [
  ["a specification file", new RegExp(["SPEC", "\\.md"].join(""), "i")],
  ["a contract file", new RegExp(["CONTRACT", "\\.md"].join(""), "i")],
  ["a shared folder outside the repository", new RegExp(["\\.\\./", "shared"].join(""))],
  ["a tracker item by number", new RegExp(["\\bissues?", "\\s+#?\\d+"].join(""), "i")],
  ["a tracker item", new RegExp(["\\bthe ", "issue\\b"].join(""), "i")]
]

/** Every tracked text file (binary files and the lock file hold no prose). */
const trackedFiles = () =>
  // Tracked files and new ones not yet added (ignored ones excluded), so a new file is checked before its commit.
  execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: ROOT, encoding: "utf8" })
    .split("\0")
    .filter((f) => f !== "" && f !== "package-lock.json")

describe("the repository stands alone", () => {
  it("no tracked file names a document outside the repository or a tracker item", () => {
    const files = trackedFiles()
    expect(files.length).toBeGreaterThan(50)
    expect(files).toContain("README.md")
    const found: Array<string> = []
    for (const file of files) {
      let text: string
      try {
        text = readFileSync(join(ROOT, file), "utf8")
      } catch {
        continue // listed but removed in the work tree
      }
      if (text.includes("\0")) continue
      text.split("\n").forEach((line, i) => {
        for (const [what, pattern] of FORBIDDEN) {
          if (pattern.test(line)) found.push(`${file}:${i + 1}: ${what}: ${line.trim().slice(0, 120)}`)
        }
      })
    }
    expect(found).toEqual([])
  })

  it("the check finds what it looks for", () => {
    const samples = ["As " + "CONTRACT" + ".md says", "see " + "SPEC" + ".md", "../" + "shared/x", "(iss" + "ue 7)", "fixes the iss" + "ue"]
    for (const sample of samples) expect(FORBIDDEN.some(([, p]) => p.test(sample)), sample).toBe(true)
    expect(FORBIDDEN.some(([, p]) => p.test("Issues are listed by code"))).toBe(false)
  })
})
