/** Specs of the commands that get, show and drop credentials: login, signup, agent create, claim, logout, whoami. */
import { flag, leaf, required, text } from "../Spec.js"

const deviceName = text("device-name", "NAME", "name of this session in the dashboard (default: the host name)")
const acceptTerms = flag("accept-terms", "accept the terms of service without asking")
const code = text("code", "CODE", "the 6-digit code from the email: verifies the flow already started (without it: asked on stdin)")

export const login = leaf({
  name: "login",
  summary: "Log in through the browser and store the tokens in the profile",
  description: "Starts a device authorization: approve the printed code in a browser (opened for you unless " +
    "--no-browser). The access and refresh tokens are stored in the profile, readable only by you.",
  flags: { noBrowser: flag("no-browser", "only print the URL; do not open a browser"), deviceName },
  args: {},
  examples: ["mailroom login", "mailroom login --no-browser --device-name \"build server\""]
})

export const signup = leaf({
  name: "signup",
  summary: "Create an account with your email address and log in",
  description: "A code is mailed to the address; type it when asked. With nothing on stdin (a script, an agent) " +
    "the command stops once the code is mailed; `mailroom signup --email ADDRESS --code CODE` then finishes it. " +
    "A service without an outbound mail relay writes the mail to its dev outbox instead (see the message after " +
    "the code is sent).",
  flags: {
    email: required(text("email", "ADDRESS", "your email address")),
    acceptTerms,
    signupCode: text("signup-code", "CODE", "a reserved sign-up code"),
    code,
    deviceName
  },
  args: {},
  examples: [
    "mailroom signup --email ada@example.com --accept-terms",
    "mailroom signup --email ada@example.com --code 123456"
  ]
})

export const agentCreate = leaf({
  name: "create",
  summary: "Create an emailless agent account and store its API key",
  flags: { acceptTerms, deviceName, force: flag("force", "replace credentials already stored in the profile") },
  args: {},
  examples: ["mailroom agent create --accept-terms", "mailroom agent create --accept-terms --profile bot --json"]
})

export const claim = leaf({
  name: "claim",
  summary: "Claim this agent account for a person (moves it to the developer plan)",
  description: "`--email` mails a code to the person; type it when asked. With nothing on stdin (a script, an " +
    "agent) the command stops once the code is mailed; `mailroom claim --email ADDRESS --code CODE` then verifies " +
    "that code (it does not ask for a new one).",
  flags: {
    email: text("email", "ADDRESS", "the person's email address (a code is mailed to it)"),
    link: flag("link", "print a single-use claim link for a person instead"),
    code
  },
  args: {},
  examples: [
    "mailroom claim --email ada@example.com",
    "mailroom claim --email ada@example.com --code 123456",
    "mailroom claim --link"
  ]
})

export const logout = leaf({
  name: "logout",
  summary: "Revoke this login and remove the stored credentials",
  flags: {},
  args: {},
  examples: ["mailroom logout", "mailroom logout --profile work"]
})

export const whoami = leaf({
  name: "whoami",
  summary: "Show the organization and credential in use",
  flags: {},
  args: {},
  examples: ["mailroom whoami", "mailroom whoami --json"]
})
