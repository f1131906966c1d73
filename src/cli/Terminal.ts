/** Terminal interaction: line prompts on stderr, a spinner (TTY only), opening a browser. */
import { Console, Effect, Fiber, Schedule } from "effect"
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { CliFailure } from "./Failure.js"

/** Reads one line from stdin (a TTY or a pipe); the question goes to stderr so stdout stays data. */
export const ask = (question: string) =>
  Effect.async<string, CliFailure>((resume) => {
    const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: process.stdin.isTTY === true })
    let answered = false
    rl.question(question, (answer) => {
      answered = true
      rl.close()
      resume(Effect.succeed(answer.trim()))
    })
    rl.on("close", () => {
      if (!answered) resume(Effect.fail(new CliFailure({ message: "no answer on stdin", usage: true })))
    })
    return Effect.sync(() => rl.close())
  })

const FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]

/** Runs `effect` with a spinner on stderr when stderr is a terminal; plain otherwise. */
export const withSpinner = <A, E, R>(text: string, effect: Effect.Effect<A, E, R>) =>
  process.stderr.isTTY !== true
    ? effect
    : Effect.gen(function*() {
      let i = 0
      const spinner = yield* Effect.sync(() => {
        process.stderr.write(`\r${FRAMES[i++ % FRAMES.length]} ${text}`)
      }).pipe(Effect.repeat(Schedule.spaced("100 millis")), Effect.fork)
      return yield* effect.pipe(
        Effect.ensuring(Fiber.interrupt(spinner).pipe(Effect.zipRight(Effect.sync(() => process.stderr.write("\r\x1b[2K")))))
      )
    })

/** Best effort: `open` on macOS, `xdg-open` elsewhere; a missing opener is not an error. */
export const openBrowser = (url: string) =>
  Effect.sync(() => {
    const command = process.platform === "darwin" ? "open" : process.platform === "win32" ? "explorer" : "xdg-open"
    try {
      const child = spawn(command, [url], { stdio: "ignore", detached: true })
      child.on("error", () => undefined)
      child.unref()
    } catch {
      // no opener: the URL is printed anyway
    }
  })

export const note = (message: string) => Console.error(message)
