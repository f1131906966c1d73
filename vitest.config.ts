import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The long fault-injection runs have their own config (`npm run test:faults`).
    exclude: ["test/faults/**", "**/node_modules/**"],
    // Builds the CLI bundle the CLI tests spawn (test/support/cli.ts).
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Two cores: one worker per core; each test file starts its own service and database.
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    reporters: ["default"]
  }
})
