import { defineConfig } from "vitest/config"

/** `npm run test:faults`: the long fault-injection runs (child processes, kill -9, database cuts). */
export default defineConfig({
  test: {
    include: ["test/faults/**/*.test.ts"],
    testTimeout: 900_000,
    hookTimeout: 120_000,
    pool: "forks",
    // One file at a time: each spawns service processes that need both cores.
    poolOptions: { forks: { maxForks: 1, minForks: 1 } },
    reporters: ["default"]
  }
})
