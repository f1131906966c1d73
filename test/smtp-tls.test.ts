/** STARTTLS on the inbound listener when a certificate is configured (SMTP_TLS_CERT / SMTP_TLS_KEY). */
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { execFileSync } from "node:child_process"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import nodemailer from "nodemailer"
import { Provisioning } from "../src/identity/Provisioning.js"
import { TestServer, testService } from "./support/harness.js"
import { call } from "./support/http.js"

const dir = mkdtempSync(join(tmpdir(), "mailroom-tls-"))
execFileSync("openssl", [
  "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=mx.mailroom.test",
  "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")
], { stdio: "ignore" })

const Env = Provisioning.Default.pipe(
  Layer.provideMerge(testService({ SMTP_TLS_CERT: join(dir, "cert.pem"), SMTP_TLS_KEY: join(dir, "key.pem"), DNS_SERVER: "127.0.0.1:9" }))
)

layer(Env, { timeout: 60_000, excludeTestServices: true })("smtp tls", (it) => {
  describe("STARTTLS", () => {
    it.effect("is offered and mail sent over TLS is accepted", () =>
      Effect.gen(function*() {
        const p = yield* Provisioning
        const org = yield* p.createOrganization({ name: "TLS", plan: "developer" })
        const { apiKey } = yield* p.issueApiKey(org.id)
        const server = yield* TestServer
        const info = yield* Effect.promise(async () => {
          const t = nodemailer.createTransport({
            host: "127.0.0.1",
            port: server.smtpPort,
            secure: false,
            requireTLS: true,
            tls: { rejectUnauthorized: false, servername: "mx.mailroom.test" }
          })
          try {
            return await t.sendMail({ from: "a@example.com", to: org.managedInboxAddress, subject: "over tls", text: "x" })
          } finally {
            t.close()
          }
        })
        expect(info.response).toMatch(/^250 /)
        const list = yield* call("GET", "/v1/emails", { token: apiKey })
        expect(list.body.data.map((e: { subject: string }) => e.subject)).toEqual(["over tls"])
      }))
  })
})
