/**
 * Real-shaped machine mail for classification tests, written after what MTAs and report senders
 * actually emit (Postfix DSNs, qmail and sendmail failure notices, Google/Microsoft TLS and DMARC
 * reports, RFC 6591 and RFC 5965 feedback reports). Each sample is raw RFC 5322 text with CRLF line
 * ends, its SMTP envelope sender and the event type it must be classified as.
 */
import { crc32, deflateRawSync, gzipSync } from "node:zlib"

export interface Sample {
  readonly name: string
  readonly envelopeFrom: string
  readonly expected: "email.received" | "email.bounced" | "email.tls_report" | "email.dmarc_report" | "email.dmarc_failure"
  readonly raw: string
}

const crlf = (lines: ReadonlyArray<string>) => lines.join("\r\n").replace(/\r?\n/g, "\r\n")
const b64 = (buf: Buffer) => buf.toString("base64").replace(/.{76}/g, "$&\r\n")
const DATE = "Fri, 20 Nov 2026 09:14:07 +0000"

/** A single-file zip archive (deflate), as Google's DMARC reports are. */
export const zipOf = (name: string, content: Buffer): Buffer => {
  const data = deflateRawSync(content)
  const crc = crc32(content)
  const nameBuf = Buffer.from(name, "utf8")
  const local = Buffer.alloc(30)
  local.writeUInt32LE(0x04034b50, 0)
  local.writeUInt16LE(20, 4)
  local.writeUInt16LE(0, 6)
  local.writeUInt16LE(8, 8)
  local.writeUInt32LE(0, 10)
  local.writeUInt32LE(crc, 14)
  local.writeUInt32LE(data.length, 18)
  local.writeUInt32LE(content.length, 22)
  local.writeUInt16LE(nameBuf.length, 26)
  local.writeUInt16LE(0, 28)
  const central = Buffer.alloc(46)
  central.writeUInt32LE(0x02014b50, 0)
  central.writeUInt16LE(20, 4)
  central.writeUInt16LE(20, 6)
  central.writeUInt16LE(0, 8)
  central.writeUInt16LE(8, 10)
  central.writeUInt32LE(0, 12)
  central.writeUInt32LE(crc, 16)
  central.writeUInt32LE(data.length, 20)
  central.writeUInt32LE(content.length, 24)
  central.writeUInt16LE(nameBuf.length, 28)
  central.writeUInt32LE(0, 30)
  central.writeUInt32LE(0, 34)
  central.writeUInt32LE(0, 38)
  central.writeUInt32LE(0, 42)
  const localSize = local.length + nameBuf.length + data.length
  const end = Buffer.alloc(22)
  end.writeUInt32LE(0x06054b50, 0)
  end.writeUInt16LE(1, 8)
  end.writeUInt16LE(1, 10)
  end.writeUInt32LE(central.length + nameBuf.length, 12)
  end.writeUInt32LE(localSize, 16)
  return Buffer.concat([local, nameBuf, data, central, nameBuf, end])
}

const aggregateXml = (domain: string) => Buffer.from(`<?xml version="1.0" encoding="UTF-8" ?>
<feedback>
  <report_metadata>
    <org_name>google.com</org_name>
    <email>noreply-dmarc-support@google.com</email>
    <report_id>11861352473312345678</report_id>
    <date_range><begin>1763596800</begin><end>1763683199</end></date_range>
  </report_metadata>
  <policy_published><domain>${domain}</domain><adkim>r</adkim><aspf>r</aspf><p>none</p><sp>none</sp><pct>100</pct></policy_published>
  <record>
    <row><source_ip>198.51.100.7</source_ip><count>3</count>
      <policy_evaluated><disposition>none</disposition><dkim>pass</dkim><spf>pass</spf></policy_evaluated></row>
    <identifiers><header_from>${domain}</header_from></identifiers>
    <auth_results><dkim><domain>${domain}</domain><result>pass</result><selector>s1</selector></dkim>
      <spf><domain>${domain}</domain><result>pass</result></spf></auth_results>
  </record>
</feedback>
`)

const tlsJson = (domain: string) => Buffer.from(JSON.stringify({
  "organization-name": "Google Inc.",
  "date-range": { "start-datetime": "2026-11-19T00:00:00Z", "end-datetime": "2026-11-19T23:59:59Z" },
  "contact-info": "smtp-tls-reporting@google.com",
  "report-id": "2026-11-19T00:00:00Z_" + domain,
  policies: [{
    policy: { "policy-type": "sts", "policy-string": ["version: STSv1", "mode: testing", `mx: mx.${domain}`, "max_age: 86400"], "policy-domain": domain },
    summary: { "total-successful-session-count": 12, "total-failure-session-count": 1 },
    "failure-details": [{ "result-type": "certificate-expired", "sending-mta-ip": "209.85.220.41", "receiving-ip": "198.51.100.7", "failed-session-count": 1 }]
  }]
}))

/** Headers of the message a bounce or report returns. */
const returnedHeaders = (from: string, to: string) => [
  `Return-Path: <${from}>`,
  "Received: from agents.example (agents.example [203.0.113.5]) by mx.example.net (Postfix) with ESMTPS id 4F1A2B3C4D; " + DATE,
  `From: Agent <${from}>`,
  `To: <${to}>`,
  "Subject: Quarterly numbers",
  "Message-ID: <orig-4711@agents.example>",
  DATE.replace(/^/, "Date: "),
  "MIME-Version: 1.0",
  "Content-Type: text/plain; charset=utf-8"
]

export const samples = (to: string): ReadonlyArray<Sample> => {
  const domain = to.slice(to.indexOf("@") + 1)
  return [
    {
      name: "RFC 3464 DSN (Postfix)",
      envelopeFrom: "",
      expected: "email.bounced",
      raw: crlf([
        "Return-Path: <>",
        "Date: " + DATE,
        "From: MAILER-DAEMON@mx.example.net (Mail Delivery System)",
        "Subject: Undelivered Mail Returned to Sender",
        `To: ${to}`,
        "Auto-Submitted: auto-replied",
        "MIME-Version: 1.0",
        "Content-Type: multipart/report; report-type=delivery-status;",
        "\tboundary=\"4F1A2B3C4D.1763630047/mx.example.net\"",
        "Content-Transfer-Encoding: 8bit",
        "Message-Id: <20261120091407.5E6F7A8B9C@mx.example.net>",
        "",
        "This is a MIME-encapsulated message.",
        "",
        "--4F1A2B3C4D.1763630047/mx.example.net",
        "Content-Description: Notification",
        "Content-Type: text/plain; charset=utf-8",
        "Content-Transfer-Encoding: 8bit",
        "",
        "This is the mail system at host mx.example.net.",
        "",
        "I'm sorry to have to inform you that your message could not",
        "be delivered to one or more recipients. It's attached below.",
        "",
        "<nobody@example.net>: host mail.example.net[198.51.100.25] said: 550 5.1.1",
        "    <nobody@example.net>: Recipient address rejected: User unknown in virtual",
        "    mailbox table (in reply to RCPT TO command)",
        "",
        "--4F1A2B3C4D.1763630047/mx.example.net",
        "Content-Description: Delivery report",
        "Content-Type: message/delivery-status",
        "",
        "Reporting-MTA: dns; mx.example.net",
        "X-Postfix-Queue-ID: 4F1A2B3C4D",
        `X-Postfix-Sender: rfc822; ${to}`,
        "Arrival-Date: " + DATE,
        "",
        "Final-Recipient: rfc822; nobody@example.net",
        "Original-Recipient: rfc822;nobody@example.net",
        "Action: failed",
        "Status: 5.1.1",
        "Remote-MTA: dns; mail.example.net",
        "Diagnostic-Code: smtp; 550 5.1.1 <nobody@example.net>: Recipient address",
        "    rejected: User unknown in virtual mailbox table",
        "",
        "--4F1A2B3C4D.1763630047/mx.example.net",
        "Content-Description: Undelivered Message Headers",
        "Content-Type: text/rfc822-headers",
        "Content-Transfer-Encoding: 8bit",
        "",
        ...returnedHeaders(to, "nobody@example.net"),
        "",
        "--4F1A2B3C4D.1763630047/mx.example.net--",
        ""
      ])
    },
    {
      name: "qmail failure notice (no DSN structure)",
      envelopeFrom: "",
      expected: "email.bounced",
      raw: crlf([
        "Return-Path: <>",
        "Date: " + DATE,
        "From: MAILER-DAEMON@mail.example.org",
        `To: ${to}`,
        "Subject: failure notice",
        "Message-ID: <qmail-1763630047@mail.example.org>",
        "",
        "Hi. This is the qmail-send program at mail.example.org.",
        "I'm afraid I wasn't able to deliver your message to the following addresses.",
        "This is a permanent error; I've given up. Sorry it didn't work out.",
        "",
        "<nobody@example.org>:",
        "Sorry, no mailbox here by that name. (#5.1.1)",
        "",
        "--- Below this line is a copy of the message.",
        "",
        ...returnedHeaders(to, "nobody@example.org"),
        "",
        "Numbers attached.",
        ""
      ])
    },
    {
      name: "sendmail returned mail with the message attached (multipart/mixed)",
      envelopeFrom: "",
      expected: "email.bounced",
      raw: crlf([
        "Date: " + DATE,
        "From: Mail Delivery Subsystem <MAILER-DAEMON@relay.example.com>",
        `To: <${to}>`,
        "Subject: Returned mail: see transcript for details",
        "Message-ID: <202611200914.2AK9E7c012345@relay.example.com>",
        "Auto-Submitted: auto-generated (failure)",
        "MIME-Version: 1.0",
        "Content-Type: multipart/mixed; boundary=\"2AK9E7c012345.1763630047/relay.example.com\"",
        "",
        "--2AK9E7c012345.1763630047/relay.example.com",
        "Content-Type: text/plain",
        "",
        "   ----- The following addresses had permanent fatal errors -----",
        "<gone@example.com>",
        "    (reason: 550 5.2.1 Mailbox disabled)",
        "",
        "--2AK9E7c012345.1763630047/relay.example.com",
        "Content-Type: message/rfc822",
        "Content-Disposition: attachment",
        "",
        ...returnedHeaders(to, "gone@example.com"),
        "",
        "Numbers attached.",
        "",
        "--2AK9E7c012345.1763630047/relay.example.com--",
        ""
      ])
    },
    {
      name: "RFC 8460 TLS report (gzip)",
      envelopeFrom: "noreply-smtp-tls-reporting@google.com",
      expected: "email.tls_report",
      raw: crlf([
        "Date: " + DATE,
        "From: noreply-smtp-tls-reporting@google.com",
        `To: ${to}`,
        `Subject: Report Domain: ${domain} Submitter: google.com Report-ID: <2026.11.19T00.00.00Z+${domain}@google.com>`,
        `TLS-Report-Domain: ${domain}`,
        "TLS-Report-Submitter: google.com",
        "Message-ID: <tlsrpt-0001@google.com>",
        "MIME-Version: 1.0",
        "Content-Type: multipart/report; boundary=\"000000000000e2f5a805f1c8a1b2\"; report-type=\"tlsrpt\"",
        "",
        "--000000000000e2f5a805f1c8a1b2",
        "Content-Type: text/plain; charset=\"UTF-8\"",
        "",
        `This is an aggregate TLS report from google.com for ${domain}.`,
        "",
        "--000000000000e2f5a805f1c8a1b2",
        `Content-Type: application/tlsrpt+gzip; name="google.com!${domain}!1763510400!1763596799!001.json.gz"`,
        `Content-Disposition: attachment; filename="google.com!${domain}!1763510400!1763596799!001.json.gz"`,
        "Content-Transfer-Encoding: base64",
        "",
        b64(gzipSync(tlsJson(domain))),
        "--000000000000e2f5a805f1c8a1b2--",
        ""
      ])
    },
    {
      name: "DMARC aggregate report, zip (Google: a single application/zip body)",
      envelopeFrom: "noreply-dmarc-support@google.com",
      expected: "email.dmarc_report",
      raw: crlf([
        "Date: " + DATE,
        "From: noreply-dmarc-support@google.com",
        `To: ${to}`,
        `Subject: Report domain: ${domain} Submitter: google.com Report-ID: 11861352473312345678`,
        "Message-ID: <11861352473312345678@google.com>",
        "MIME-Version: 1.0",
        `Content-Type: application/zip; name="google.com!${domain}!1763596800!1763683199.zip"`,
        `Content-Disposition: attachment; filename="google.com!${domain}!1763596800!1763683199.zip"`,
        "Content-Transfer-Encoding: base64",
        "",
        b64(zipOf(`google.com!${domain}!1763596800!1763683199.xml`, aggregateXml(domain))),
        ""
      ])
    },
    {
      name: "DMARC aggregate report, gzip (Microsoft: text part + application/gzip)",
      envelopeFrom: "dmarcreport@microsoft.com",
      expected: "email.dmarc_report",
      raw: crlf([
        "Date: " + DATE,
        "From: DMARC Aggregate Report <dmarcreport@microsoft.com>",
        `To: ${to}`,
        `Subject: Report Domain: ${domain} Submitter: protection.outlook.com Report-ID: 7b0a4f1e2c3d4e5f8a9b0c1d2e3f4a5b`,
        "Message-ID: <7b0a4f1e2c3d4e5f8a9b0c1d2e3f4a5b@microsoft.com>",
        "MIME-Version: 1.0",
        "Content-Type: multipart/mixed; boundary=\"_mixed_7b0a4f1e\"",
        "",
        "--_mixed_7b0a4f1e",
        "Content-Type: text/plain; charset=\"us-ascii\"",
        "",
        "This is a DMARC aggregate report from Microsoft Corporation.",
        "",
        "--_mixed_7b0a4f1e",
        `Content-Type: application/gzip; name="protection.outlook.com!${domain}!1763596800!1763683200.xml.gz"`,
        `Content-Disposition: attachment; filename="protection.outlook.com!${domain}!1763596800!1763683200.xml.gz"`,
        "Content-Transfer-Encoding: base64",
        "",
        b64(gzipSync(aggregateXml(domain))),
        "--_mixed_7b0a4f1e--",
        ""
      ])
    },
    {
      name: "RFC 6591 DMARC failure report (auth-failure)",
      envelopeFrom: "dmarc-ruf@receiver.example",
      expected: "email.dmarc_failure",
      raw: crlf([
        "Date: " + DATE,
        "From: DMARC Failure Reports <dmarc-ruf@receiver.example>",
        `To: ${to}`,
        `Subject: FW: Quarterly numbers (DMARC failure report for ${domain})`,
        "Message-ID: <ruf-20261120-0001@receiver.example>",
        "MIME-Version: 1.0",
        "Content-Type: multipart/report; report-type=feedback-report;",
        "\tboundary=\"part1_13d.2e68ed54_boundary\"",
        "",
        "--part1_13d.2e68ed54_boundary",
        "Content-Type: text/plain; charset=\"US-ASCII\"",
        "Content-Transfer-Encoding: 7bit",
        "",
        "This is an authentication failure report for an email message received from IP",
        `192.0.2.1 on ${DATE}.`,
        "",
        "--part1_13d.2e68ed54_boundary",
        "Content-Type: message/feedback-report",
        "",
        "Feedback-Type: auth-failure",
        "User-Agent: SomeGenerator/1.0",
        "Version: 1",
        `Original-Mail-From: <spoof@${domain}>`,
        "Original-Rcpt-To: <user@receiver.example>",
        "Arrival-Date: " + DATE,
        "Source-IP: 192.0.2.1",
        `Authentication-Results: mx.receiver.example; dmarc=fail (p=reject) header.from=${domain}`,
        `Reported-Domain: ${domain}`,
        "Delivery-Result: reject",
        "Auth-Failure: dmarc",
        "Identity-Alignment: none",
        "",
        "--part1_13d.2e68ed54_boundary",
        "Content-Type: text/rfc822-headers",
        "",
        ...returnedHeaders(`spoof@${domain}`, "user@receiver.example"),
        "",
        "--part1_13d.2e68ed54_boundary--",
        ""
      ])
    },
    {
      name: "RFC 5965 ARF abuse complaint (stays email.received)",
      envelopeFrom: "fbl@isp.example",
      expected: "email.received",
      raw: crlf([
        "Date: " + DATE,
        "From: <fbl@isp.example>",
        `To: <${to}>`,
        "Subject: FW: Quarterly numbers",
        "Message-ID: <fbl-0001@isp.example>",
        "MIME-Version: 1.0",
        "Content-Type: multipart/report; report-type=feedback-report;",
        "\tboundary=\"part1_13d.2e68ed54_boundary\"",
        "",
        "--part1_13d.2e68ed54_boundary",
        "Content-Type: text/plain; charset=\"US-ASCII\"",
        "",
        "This is an email abuse report for an email message received from IP 203.0.113.5",
        `on ${DATE}. For more information about this format please see`,
        "http://www.mipassoc.org/arf/.",
        "",
        "--part1_13d.2e68ed54_boundary",
        "Content-Type: message/feedback-report",
        "",
        "Feedback-Type: abuse",
        "User-Agent: SomeGenerator/1.0",
        "Version: 1",
        `Original-Mail-From: <${to}>`,
        "Original-Rcpt-To: <user@isp.example>",
        "Received-Date: " + DATE,
        "Source-IP: 203.0.113.5",
        `Reported-Domain: ${domain}`,
        "",
        "--part1_13d.2e68ed54_boundary",
        "Content-Type: message/rfc822",
        "Content-Disposition: inline",
        "",
        ...returnedHeaders(to, "user@isp.example"),
        "",
        "Numbers attached.",
        "",
        "--part1_13d.2e68ed54_boundary--",
        ""
      ])
    },
    {
      name: "Postfix delay warning, a DSN with Action: delayed (not a bounce: stays email.received)",
      envelopeFrom: "",
      expected: "email.received",
      raw: crlf([
        "Date: " + DATE,
        "From: MAILER-DAEMON@mx.example.net (Mail Delivery System)",
        "Subject: Delayed Mail (still being retried)",
        `To: ${to}`,
        "Auto-Submitted: auto-replied",
        "Message-Id: <20261120131407.6A7B8C9D0E@mx.example.net>",
        "MIME-Version: 1.0",
        "Content-Type: multipart/report; report-type=delivery-status;",
        "\tboundary=\"6A7B8C9D0E.1763644447/mx.example.net\"",
        "",
        "--6A7B8C9D0E.1763644447/mx.example.net",
        "Content-Description: Notification",
        "Content-Type: text/plain; charset=us-ascii",
        "",
        "This is the mail system at host mx.example.net.",
        "",
        "####################################################################",
        "# THIS IS A WARNING ONLY.  YOU DO NOT NEED TO RESEND YOUR MESSAGE. #",
        "####################################################################",
        "",
        "Your message could not be delivered for more than 4 hour(s).",
        "It will be retried until it is 5 day(s) old.",
        "",
        "--6A7B8C9D0E.1763644447/mx.example.net",
        "Content-Description: Delivery report",
        "Content-Type: message/delivery-status",
        "",
        "Reporting-MTA: dns; mx.example.net",
        "Arrival-Date: " + DATE,
        "",
        "Final-Recipient: rfc822; someone@slow.example",
        "Action: delayed",
        "Status: 4.4.1",
        "Diagnostic-Code: X-Postfix; connect to mx.slow.example[198.51.100.9]:25: Connection timed out",
        "Will-Retry-Until: Wed, 25 Nov 2026 09:14:07 +0000",
        "",
        "--6A7B8C9D0E.1763644447/mx.example.net",
        "Content-Description: Undelivered Message Headers",
        "Content-Type: text/rfc822-headers",
        "",
        ...returnedHeaders(to, "someone@slow.example"),
        "",
        "--6A7B8C9D0E.1763644447/mx.example.net--",
        ""
      ])
    },
    {
      name: "a person forwarding a bounce as an attachment (stays email.received)",
      envelopeFrom: "bob@example.com",
      expected: "email.received",
      raw: crlf([
        "Date: " + DATE,
        "From: Bob <bob@example.com>",
        `To: ${to}`,
        "Subject: Fwd: Undelivered Mail Returned to Sender",
        "Message-ID: <fwd-0001@example.com>",
        "MIME-Version: 1.0",
        "Content-Type: multipart/mixed; boundary=\"outer\"",
        "",
        "--outer",
        "Content-Type: text/plain; charset=utf-8",
        "",
        "Could you check why this bounced?",
        "",
        "--outer",
        "Content-Type: message/rfc822",
        "Content-Disposition: attachment; filename=\"bounce.eml\"",
        "",
        "From: MAILER-DAEMON@mx.example.net (Mail Delivery System)",
        "Subject: Undelivered Mail Returned to Sender",
        "MIME-Version: 1.0",
        "Content-Type: multipart/report; report-type=delivery-status; boundary=\"inner\"",
        "",
        "--inner",
        "Content-Type: text/plain",
        "",
        "Your message could not be delivered.",
        "--inner",
        "Content-Type: message/delivery-status",
        "",
        "Reporting-MTA: dns; mx.example.net",
        "",
        "Final-Recipient: rfc822; nobody@example.net",
        "Action: failed",
        "Status: 5.1.1",
        "",
        "--inner--",
        "",
        "--outer--",
        ""
      ])
    },
    {
      name: "plain mail with an attachment",
      envelopeFrom: "alice@example.com",
      expected: "email.received",
      raw: crlf([
        "Date: " + DATE,
        "From: Alice <alice@example.com>",
        `To: ${to}`,
        "Subject: Report for the domain review",
        "Message-ID: <plain-0001@example.com>",
        "MIME-Version: 1.0",
        "Content-Type: multipart/mixed; boundary=\"mixed\"",
        "",
        "--mixed",
        "Content-Type: text/plain; charset=utf-8",
        "",
        "Hi, the report is attached.",
        "",
        "--mixed",
        "Content-Type: application/pdf; name=\"report.pdf\"",
        "Content-Disposition: attachment; filename=\"report.pdf\"",
        "Content-Transfer-Encoding: base64",
        "",
        b64(Buffer.from("%PDF-1.4\n% sample\n")),
        "--mixed--",
        ""
      ])
    }
  ]
}
