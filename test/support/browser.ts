/**
 * Headless Chromium for the page tests, one per test file. By default it is the build that ships
 * inside the `@sparticuz/chromium` npm package (a brotli-compressed binary plus the NSS libraries it
 * links), so `npm install && npm test` needs no browser on the machine and no network. The first use
 * unpacks it into a cache directory named after the package version; `MAILROOM_TEST_BROWSER` names
 * another Chromium executable instead (e.g. /usr/bin/chromium).
 */
import { Effect, Layer } from "effect"
import { createReadStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { createWriteStream } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { pipeline } from "node:stream/promises"
import { createBrotliDecompress } from "node:zlib"
import { type Browser, chromium } from "playwright-core"
import tar from "tar-stream"

export class TestBrowser extends Effect.Tag("test/Browser")<TestBrowser, Browser>() {}

/** What to launch: the executable and the environment it needs (library and font paths). */
export interface BrowserExecutable {
  readonly executablePath: string
  readonly env: Readonly<Record<string, string>>
}

const packageRoot = () => {
  const main = createRequire(import.meta.url).resolve("@sparticuz/chromium")
  // build/cjs/index.cjs → the package root, which holds bin/ with the compressed files.
  return join(dirname(main), "..", "..")
}

const brotliFile = (from: string, to: string, mode: number) =>
  pipeline(createReadStream(from), createBrotliDecompress(), createWriteStream(to, { mode }))

/** Regular files of a brotli-compressed tar into `dir` (the package's archives hold nothing else). */
const brotliTar = async (from: string, dir: string) => {
  const extract = tar.extract()
  const done = pipeline(createReadStream(from), createBrotliDecompress(), extract)
  for await (const entry of extract) {
    const target = join(dir, entry.header.name)
    if (!target.startsWith(dir) || entry.header.type !== "file") {
      entry.resume()
      continue
    }
    mkdirSync(dirname(target), { recursive: true })
    await pipeline(entry, createWriteStream(target, { mode: entry.header.mode ?? 0o644 }))
  }
  await done
}

/**
 * Unpacks the packaged Chromium once per package version. A run unpacks into a private directory
 * and renames it into place, so parallel test workers (or checkouts) never see a half-written binary.
 */
export const packagedChromium = async (): Promise<BrowserExecutable> => {
  const root = packageRoot()
  const version = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string }).version
  const dir = join(tmpdir(), `mailroom-chromium-${version}`)
  const executablePath = join(dir, "chromium")
  if (!existsSync(executablePath)) {
    const staging = `${dir}.${process.pid}.${Date.now()}`
    mkdirSync(staging, { recursive: true })
    try {
      const bin = join(root, "bin")
      await brotliFile(join(bin, "chromium.br"), join(staging, "chromium"), 0o755)
      // NSS, NSPR and expat built for Amazon Linux: with them the binary needs only glibc.
      await brotliTar(join(bin, "al2023.tar.br"), staging)
      await brotliTar(join(bin, "fonts.tar.br"), staging)
      writeFileSync(
        join(staging, "fonts.conf"),
        `<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>\n  <dir>${join(dir, "fonts")}</dir>\n` +
          `  <cachedir>${join(dir, "fonts-cache")}</cachedir>\n</fontconfig>\n`
      )
      try {
        renameSync(staging, dir)
      } catch (e) {
        // Another worker got there first; its copy is complete.
        if (!existsSync(executablePath)) throw e
      }
    } finally {
      rmSync(staging, { recursive: true, force: true })
    }
  }
  return { executablePath, env: { LD_LIBRARY_PATH: join(dir, "lib"), FONTCONFIG_PATH: dir } }
}

/** `MAILROOM_TEST_BROWSER` when set, else the packaged Chromium. */
export const testBrowserExecutable = async (): Promise<BrowserExecutable> => {
  const configured = process.env.MAILROOM_TEST_BROWSER
  if (configured !== undefined && configured !== "") {
    if (!existsSync(configured)) throw new Error(`MAILROOM_TEST_BROWSER=${configured}: no such file`)
    return { executablePath: configured, env: {} }
  }
  if (process.platform !== "linux" || process.arch !== "x64") {
    throw new Error(
      `the packaged Chromium runs on Linux x64 only (this is ${process.platform} ${process.arch}): ` +
        "set MAILROOM_TEST_BROWSER to a Chromium or Chrome executable"
    )
  }
  return packagedChromium()
}

export const launchTestBrowser = async (): Promise<Browser> => {
  const { executablePath, env } = await testBrowserExecutable()
  return chromium.launch({
    executablePath,
    env: { ...process.env, ...env },
    // No background networking: the tests run offline and only talk to loopback services.
    args: [
      "--no-sandbox",
      "--no-zygote",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run"
    ]
  })
}

export const TestBrowserLive = Layer.scoped(
  TestBrowser,
  Effect.acquireRelease(Effect.promise(launchTestBrowser), (browser) => Effect.promise(() => browser.close()))
)
