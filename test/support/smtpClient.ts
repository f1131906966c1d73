/**
 * A plain SMTP client over a socket, one command at a time, for tests that need commands a mail
 * library would not send (the same recipient a hundred times, MAIL FROM SIZE=…) and every reply.
 */
import { Socket } from "node:net"

export interface SmtpReply {
  readonly code: number
  readonly text: string
}

export interface SmtpConversation {
  /** Sends one command line and answers its (possibly multi-line) reply. */
  readonly command: (line: string) => Promise<SmtpReply>
  /** Sends a message body (dot-stuffed, CRLF line ends) after a 354, and answers the final reply. */
  readonly data: (body: string) => Promise<SmtpReply>
  readonly close: () => void
}

export const openSmtp = (port: number): Promise<SmtpConversation & { readonly greeting: SmtpReply }> =>
  new Promise((resolve, reject) => {
    const socket = new Socket()
    let buffer = ""
    const waiting: Array<(r: SmtpReply) => void> = []
    const ready: Array<SmtpReply> = []
    const deliver = (r: SmtpReply) => {
      const w = waiting.shift()
      if (w) w(r)
      else ready.push(r)
    }
    let lines: Array<string> = []
    socket.setEncoding("utf8")
    socket.on("data", (chunk: string) => {
      buffer += chunk
      let at: number
      while ((at = buffer.indexOf("\r\n")) >= 0) {
        const line = buffer.slice(0, at)
        buffer = buffer.slice(at + 2)
        lines.push(line)
        if (/^\d{3} /.test(line) || /^\d{3}$/.test(line)) {
          deliver({ code: Number(line.slice(0, 3)), text: lines.map((l) => l.slice(4)).join("\n") })
          lines = []
        }
      }
    })
    socket.on("error", reject)
    const next = () =>
      new Promise<SmtpReply>((res) => {
        const r = ready.shift()
        if (r) res(r)
        else waiting.push(res)
      })
    socket.connect(port, "127.0.0.1", () => {
      void next().then((greeting) =>
        resolve({
          greeting,
          command: (line) => {
            socket.write(`${line}\r\n`)
            return next()
          },
          data: (body) => {
            const stuffed = body.replace(/\r?\n/g, "\r\n").split("\r\n").map((l) => (l.startsWith(".") ? `.${l}` : l)).join("\r\n")
            socket.write(`${stuffed}\r\n.\r\n`)
            return next()
          },
          close: () => socket.destroy()
        })
      )
    })
  })
