/**
 * What an attachment is, judged from its first bytes (magic numbers), not from the name or the
 * Content-Type a sender chose: a Windows program renamed `invoice.pdf` is still `exe`. A small fixed
 * table instead of a general detector: only the kinds the trust signals and the attachment policy
 * ask about need telling apart, and each check is a few byte comparisons.
 */

/** How many leading bytes of each attachment the parser keeps for sniffing (tar's magic sits at 257). */
export const SNIFF_BYTES = 512

export type Kind =
  | "exe" | "elf" | "macho" | "script" | "java_class"
  | "zip" | "office" | "jar" | "rar" | "7z" | "gzip" | "bzip2" | "xz" | "tar" | "cab"
  | "pdf" | "png" | "jpeg" | "gif" | "webp" | "text"

/** Kinds a computer runs as a program. */
export const EXECUTABLE_KINDS: ReadonlySet<string> = new Set(["exe", "elf", "macho", "script", "java_class", "jar"])
/** Kinds that hold other files (what an office document or a jar is made of does not count). */
export const ARCHIVE_KINDS: ReadonlySet<string> = new Set(["zip", "rar", "7z", "gzip", "bzip2", "xz", "tar", "cab"])

/** MIME type of each kind, for policies written with MIME types (`application/pdf`, `image/*`). */
export const MIME_OF: Readonly<Record<Kind, string>> = {
  exe: "application/x-msdownload",
  elf: "application/x-executable",
  macho: "application/x-mach-binary",
  script: "text/x-shellscript",
  java_class: "application/java-vm",
  zip: "application/zip",
  office: "application/vnd.openxmlformats-officedocument",
  jar: "application/java-archive",
  rar: "application/vnd.rar",
  "7z": "application/x-7z-compressed",
  gzip: "application/gzip",
  bzip2: "application/x-bzip2",
  xz: "application/x-xz",
  tar: "application/x-tar",
  cab: "application/vnd.ms-cab-compressed",
  pdf: "application/pdf",
  png: "image/png",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  text: "text/plain"
}

const starts = (b: Uint8Array, sig: ReadonlyArray<number>, at = 0) => {
  if (b.length < at + sig.length) return false
  for (let i = 0; i < sig.length; i++) if (b[at + i] !== sig[i]) return false
  return true
}
const ascii = (s: string) => Array.from(s, (c) => c.charCodeAt(0))

const PK = [0x50, 0x4b, 0x03, 0x04]

/** A zip's first entry names what it is: OOXML/ODF documents and jars are zips too. */
const zipKind = (b: Uint8Array): Kind => {
  const nameLength = (b[26] ?? 0) | ((b[27] ?? 0) << 8)
  const name = Buffer.from(b.subarray(30, 30 + Math.min(nameLength, 128))).toString("latin1")
  if (name === "META-INF/MANIFEST.MF" || name === "META-INF/") return "jar"
  if (name === "[Content_Types].xml" || name === "mimetype" || name.startsWith("_rels/") || name.startsWith("docProps/") ||
    name.startsWith("word/") || name.startsWith("xl/") || name.startsWith("ppt/")) return "office"
  return "zip"
}

/** Plain text: no NUL and no other C0 control than tab, CR, LF, FF in the bytes seen. */
const looksText = (b: Uint8Array) => {
  if (b.length === 0) return false
  for (const c of b) if (c === 0 || (c < 0x20 && c !== 9 && c !== 10 && c !== 13 && c !== 12)) return false
  return true
}

/** The kind of content starting with `head`; null when none of the table's. */
export const sniff = (head: Uint8Array): Kind | null => {
  if (starts(head, [0x4d, 0x5a])) return "exe" // MZ: DOS/Windows PE programs and DLLs
  if (starts(head, [0x7f, 0x45, 0x4c, 0x46])) return "elf" // Linux/Unix programs
  if (starts(head, [0xcf, 0xfa, 0xed, 0xfe]) || starts(head, [0xce, 0xfa, 0xed, 0xfe]) ||
    starts(head, [0xfe, 0xed, 0xfa, 0xcf]) || starts(head, [0xfe, 0xed, 0xfa, 0xce])) return "macho"
  // 0xCAFEBABE is a Java class, or a universal Mach-O (which gives a small architecture count next).
  if (starts(head, [0xca, 0xfe, 0xba, 0xbe])) return (head[7] ?? 0) < 0x20 && head[4] === 0 && head[5] === 0 ? "macho" : "java_class"
  if (starts(head, ascii("#!"))) return "script"
  if (starts(head, PK)) return zipKind(head)
  if (starts(head, ascii("Rar!\x1a\x07"))) return "rar"
  if (starts(head, [0x37, 0x7a, 0xbc, 0xaf, 0x27, 0x1c])) return "7z"
  if (starts(head, [0x1f, 0x8b])) return "gzip"
  if (starts(head, ascii("BZh"))) return "bzip2"
  if (starts(head, [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00])) return "xz"
  if (starts(head, ascii("MSCF"))) return "cab"
  if (starts(head, ascii("ustar"), 257)) return "tar"
  if (starts(head, ascii("%PDF-"))) return "pdf"
  if (starts(head, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return "png"
  if (starts(head, [0xff, 0xd8, 0xff])) return "jpeg"
  if (starts(head, ascii("GIF87a")) || starts(head, ascii("GIF89a"))) return "gif"
  if (starts(head, ascii("RIFF")) && starts(head, ascii("WEBP"), 8)) return "webp"
  return looksText(head) ? "text" : null
}

/** Names Windows runs when opened, whatever the content (scripts are text: only the name tells). */
const EXECUTABLE_NAME = /\.(exe|scr|com|pif|bat|cmd|msi|msp|vbs|vbe|js|jse|wsf|wsh|hta|ps1|psm1|lnk|reg|cpl|jar|apk|app|dmg|sh)$/i
const ARCHIVE_NAME = /\.(zip|rar|7z|gz|tgz|bz2|xz|tar|cab|iso|img|ace|arj|lz|lzh|z)$/i

export const isExecutable = (kind: string | null, filename: string | null) =>
  (kind !== null && EXECUTABLE_KINDS.has(kind)) || (filename !== null && EXECUTABLE_NAME.test(filename.trim()))

export const isArchive = (kind: string | null, filename: string | null) =>
  (kind !== null && ARCHIVE_KINDS.has(kind)) || (kind !== "office" && filename !== null && ARCHIVE_NAME.test(filename.trim()))

/**
 * Whether an attachment is of a type a policy names: a MIME type (`application/pdf`), a family
 * (`image/*`), a kind (`exe`, `zip`) or the groups `executable` and `archive`. Judged from content;
 * the declared type counts only for content the table cannot tell (`text`, or none).
 */
export const matchesType = (pattern: string, a: { kind: string | null; filename: string | null; content_type: string }) => {
  const p = pattern.trim().toLowerCase()
  if (p === "executable") return isExecutable(a.kind, a.filename)
  if (p === "archive") return isArchive(a.kind, a.filename)
  if (a.kind !== null && p === a.kind) return true
  const mime = a.kind !== null && a.kind !== "text" ? MIME_OF[a.kind as Kind] : a.content_type.toLowerCase()
  if (p.endsWith("/*")) return mime.startsWith(p.slice(0, -1))
  return mime === p || (a.kind === "office" && p.startsWith("application/vnd.openxmlformats-officedocument"))
}
