/**
 * Every mail the service sends, as data: subject, a plain-text part (always) and an HTML part.
 * Templates never log or embed anything but what the recipient needs.
 */
export interface MailContent {
  readonly subject: string
  readonly text: string
  readonly html: string
}

const escapeHtml = (s: string) =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

const layout = (title: string, paragraphs: ReadonlyArray<string>, code?: string) =>
  `<!doctype html><html><body style="font-family:system-ui,sans-serif;max-width:520px">` +
  `<h1 style="font-size:18px">${escapeHtml(title)}</h1>` +
  (code !== undefined ? `<p style="font-size:28px;letter-spacing:4px;font-family:monospace"><b>${escapeHtml(code)}</b></p>` : "") +
  paragraphs.map((p) => `<p>${escapeHtml(p)}</p>`).join("") +
  `<p style="color:#666">Mailroom</p></body></html>`

const codeMail = (subject: string, intro: string, code: string, minutes: number): MailContent => {
  const lines = [
    intro,
    `The code expires in ${minutes} minutes. If you did not ask for it, ignore this email.`
  ]
  return {
    subject,
    text: `Your Mailroom code: ${code}\n\n${lines.join("\n\n")}\n\n-- Mailroom\n`,
    html: layout(subject, lines, code)
  }
}

export const Templates = {
  signupCode: (code: string, minutes: number): MailContent =>
    codeMail(
      "Your Mailroom sign-up code",
      "Enter this code to finish creating your Mailroom account.",
      code,
      minutes
    ),
  claimCode: (code: string, minutes: number, address: string | null): MailContent =>
    codeMail(
      "Confirm your email to claim a Mailroom agent account",
      `Enter this code to claim the agent account${address ? ` with the inbox ${address}` : ""}. ` +
        "It moves to the developer plan and keeps its API key and inbox.",
      code,
      minutes
    ),
  deviceSignInCode: (code: string, minutes: number): MailContent =>
    codeMail(
      "Your Mailroom sign-in code",
      "Enter this code on the device sign-in page to approve a CLI login.",
      code,
      minutes
    ),
  claimAttemptNotice: (address: string | null): MailContent => {
    const lines = [
      `Someone asked to claim a Mailroom agent account${address ? ` (inbox ${address})` : ""} with this address, ` +
        "but it already belongs to a Mailroom account, so no code was sent and the claim cannot finish.",
      "If this was you, claim the agent account with another address. If it was not you, ignore this email: nothing changed."
    ]
    return {
      subject: "Mailroom: a claim with your address was refused",
      text: `${lines.join("\n\n")}\n\n-- Mailroom\n`,
      html: layout("A claim with your address was refused", lines)
    }
  },
  noAccount: (signupHint: string): MailContent => {
    const lines = [
      "Someone asked to sign in to Mailroom with this address, but no Mailroom account uses it.",
      `To create one, run the sign-up: ${signupHint}. If this was not you, ignore this email.`
    ]
    return {
      subject: "Mailroom sign-in: no account for this address",
      text: `${lines.join("\n\n")}\n\n-- Mailroom\n`,
      html: layout("No Mailroom account for this address", lines)
    }
  }
} as const
