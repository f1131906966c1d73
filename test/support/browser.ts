/** Headless Debian Chromium for the page tests, one per test file (flags as in platform-notes: no background networking). */
import { Effect, Layer } from "effect"
import { type Browser, chromium } from "playwright-core"

export class TestBrowser extends Effect.Tag("test/Browser")<TestBrowser, Browser>() {}

export const TestBrowserLive = Layer.scoped(
  TestBrowser,
  Effect.acquireRelease(
    Effect.promise(() =>
      chromium.launch({
        executablePath: "/usr/bin/chromium",
        args: [
          "--no-sandbox",
          "--disable-gpu",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          "--no-first-run"
        ]
      })
    ),
    (browser) => Effect.promise(() => browser.close())
  )
)
