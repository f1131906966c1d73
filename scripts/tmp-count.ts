import pg from "pg"
import { provision, scratch, startService } from "./bench-support.js"
import { createServer } from "node:net"
const main = async () => {
  const server = createServer((s) => { s.write("220 x\r\n"); let inData = false; let buf = ""; s.on("data", (c) => { buf += c.toString(); for(;;){ if (inData) { const e = buf.indexOf("\r\n.\r\n"); if (e<0) return; buf = buf.slice(e+5); inData=false; s.write("250 ok\r\n"); continue } const nl = buf.indexOf("\r\n"); if (nl<0) return; const l = buf.slice(0,nl); buf = buf.slice(nl+2); if (/^data/i.test(l)) { inData = true; s.write("354 go\r\n") } else if (/^ehlo/i.test(l)) s.write("250-x\r\n250 8BITMIME\r\n"); else s.write("250 ok\r\n") } }) })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  const db = await scratch("cnt")
  const env = { ...db.env, OUTBOUND_SMTP_URL: `smtp://127.0.0.1:${(server.address() as any).port}` }
  const [org] = await provision(env, 1, "pro")
  const c = new pg.Client({ connectionString: db.adminUrl }); await c.connect()
  const name = new URL(db.adminUrl!).pathname.slice(1)
  await c.query(`ALTER DATABASE ${name} SET log_statement = 'all'`)
  const svc = await startService(env)
  const stat = async () => (await c.query(`SELECT xact_commit, xact_rollback, tup_returned, tup_fetched, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database WHERE datname = $1`, [name])).rows[0]
  const send = (i: number) => fetch(`${svc.baseUrl}/v1/send-mail`, { method: "POST", headers: { authorization: `Bearer ${org!.apiKey}`, "content-type": "application/json" }, body: JSON.stringify({ from: org!.address, to: "a@example.com", subject: `s${i}`, text: "hi" }) }).then((r) => r.text())
  for (let i = 0; i < 10; i++) await send(i)
  await new Promise((r) => setTimeout(r, 1000))
  await c.query("SELECT 'marker-start'")
  await send(1000)
  await c.query("SELECT 'marker-end'")
  const a = await stat()
  for (let i = 10; i < 110; i++) await send(i)
  await new Promise((r) => setTimeout(r, 1000))
  const b = await stat()
  console.log(Object.fromEntries(Object.keys(a).map((k) => [k, (Number(b[k]) - Number(a[k])) / 100])))
  await c.end(); await svc.stop(); server.close(); await db.cleanup()
}
main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1) })
