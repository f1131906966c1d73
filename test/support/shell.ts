/** Running documentation as written: the fenced `sh` blocks of a markdown document, through bash. */
import { spawn } from "node:child_process"

export const blocksOf = (markdown: string) => [...markdown.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!)

/** The fenced `sh` blocks of one `## ` section. */
export const sectionBlocks = (markdown: string, heading: string) => {
  const start = markdown.indexOf(`\n## ${heading}\n`)
  if (start < 0) throw new Error(`no section "${heading}"`)
  const rest = markdown.slice(start + heading.length + 5)
  const end = rest.search(/\n## /)
  return blocksOf(end < 0 ? rest : rest.slice(0, end))
}

/** `bash -e -c script` in `cwd`, killed with its background jobs when it ends or after `timeoutMs`. */
export const runBash = (script: string, cwd: string, env: Record<string, string>, timeoutMs: number) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const out = { stdout: "", stderr: "" }
    // Its own process group, so background jobs end with it.
    const child = spawn("bash", ["-e", "-c", script], { cwd, env, detached: true, stdio: ["ignore", "pipe", "pipe"] })
    child.stdout.on("data", (c: Buffer) => (out.stdout += c.toString("utf8")))
    child.stderr.on("data", (c: Buffer) => (out.stderr += c.toString("utf8")))
    const killGroup = () => {
      try {
        process.kill(-child.pid!, "SIGKILL")
      } catch {
        // already gone
      }
    }
    const timer = setTimeout(killGroup, timeoutMs)
    child.once("exit", (code) => {
      clearTimeout(timer)
      killGroup()
      resolve({ code, ...out })
    })
  })
