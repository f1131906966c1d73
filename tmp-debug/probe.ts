import { provision, scratch, startService } from "../scripts/bench-support.js"
const main = async () => {
  const db = await scratch("fnprobe")
  db.env.FUNCTION_TIMEOUT = "20s"
  const orgs = await provision(db.env, 1)
  const service = await startService(db.env)
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${service.baseUrl}/v1${path}`, { method, headers: { authorization: `Bearer ${orgs[0]!.apiKey}`, "content-type": "application/json" }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) })
    return (await r.json() as any).data
  }
  try {
    const fn = await api("POST", "/functions", { name: "probe", code: `export default { async fetch(req, env) {
      const t0 = Date.now(); const a = await env.MAILROOM.fetch("/v1/account"); const t1 = Date.now();
      await env.MEMORY.put("k", JSON.stringify(1)); const t2 = Date.now();
      console.log("timings", t1 - t0, t2 - t1, {x: 1});
      return new Response(JSON.stringify({ id: (await a.json()).data.id })) } }` })
    for (let i = 0; i < 4; i++) {
      const t = performance.now()
      const r = await api("POST", `/functions/${fn.id}/invoke`, {})
      console.log(Math.round(performance.now() - t), JSON.stringify(r).slice(0, 400))
    }
  } finally { await service.stop(); await db.cleanup() }
}
main().catch((e) => { console.error(e); process.exit(1) })
