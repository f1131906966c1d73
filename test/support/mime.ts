/** Adversarial MIME shapes shared by the hostile-input tests (each built on demand, never kept). */
export const adversarial = (): Record<string, Buffer> => {
  const nest = (depth: number) => {
    let s = "From: a@example.com\r\nSubject: deep\r\n"
    for (let i = 0; i < depth; i++) s += `Content-Type: multipart/mixed; boundary="b${i}"\r\n\r\n--b${i}\r\n`
    s += "Content-Type: text/plain\r\n\r\nhi\r\n"
    for (let i = depth - 1; i >= 0; i--) s += `--b${i}--\r\n`
    return Buffer.from(s)
  }
  const parts = (n: number) => {
    let s = "From: a@example.com\r\nSubject: many parts\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n"
    for (let i = 0; i < n; i++) s += `--x\r\nContent-Type: text/plain\r\n\r\npart ${i}\r\n`
    return Buffer.from(`${s}--x--\r\n`)
  }
  return {
    "50,000-address To header": Buffer.from(
      `From: a@example.com\r\nTo: ${Array.from({ length: 50_000 }, (_, i) => `u${i}@example.io`).join(", ")}\r\nSubject: wide\r\n\r\nbody`
    ),
    "10,000 MIME parts": parts(10_000),
    "multipart nested 2,000 deep": nest(2000),
    "998-byte lines × 2,000": Buffer.from(`From: a@example.com\r\nSubject: lines\r\n\r\n${`${"y".repeat(998)}\r\n`.repeat(2000)}`),
    "5 MB Subject": Buffer.from(`From: a@example.com\r\nSubject: ${"x".repeat(5_000_000)}\r\n\r\nbody`),
    "broken base64": Buffer.from(`From: a@example.com\r\nContent-Transfer-Encoding: base64\r\n\r\n${"!!@@".repeat(150_000)}`),
    "unknown charset": Buffer.from("From: a@example.com\r\nContent-Type: text/plain; charset=x-nope\r\n\r\n\xff\xfe\x00"),
    "1 MB encoded word": Buffer.from(`From: a@example.com\r\nSubject: =?utf-8?B?${"QUJD".repeat(250_000)}?=\r\n\r\nx`),
    "20,000 RFC 2231 parameters": Buffer.from(
      `From: a@example.com\r\nContent-Type: text/plain; ${Array.from({ length: 20_000 }, (_, i) => `name*${i}*=x`).join("; ")}\r\n\r\nx`
    ),
    "3,000 nested message/rfc822": Buffer.from(
      `From: a@example.com\r\nContent-Type: message/rfc822\r\n\r\n${"Content-Type: message/rfc822\r\n\r\n".repeat(3000)}x`
    ),
    "no header end": Buffer.from("From: a@example.com\r\nSubject: unterminated"),
    "NUL everywhere": Buffer.from("From: a\u0000@example.com\r\nSubject: n\u0000l\r\n\r\nb\u0000dy"),
    "only CR": Buffer.from("From: a@example.com\rSubject: cr\r\rbody"),
    empty: Buffer.alloc(0)
  }
}
