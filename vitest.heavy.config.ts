import { defineConfig } from "vitest/config"
import { HEAVY_SUITES } from "./test/suites.js"

/** The first half of `npm run test:faults`: the heavy suites `npm test` leaves out (test/suites.ts). */
export default defineConfig({
  test: {
    include: HEAVY_SUITES,
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 300_000,
    hookTimeout: 120_000,
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    reporters: ["default"]
  }
})
