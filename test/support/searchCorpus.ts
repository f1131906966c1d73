/**
 * A small mailbox for search tests: twenty messages on distinct topics, and paraphrase queries
 * that share no content word with the message they mean (checked by `sharedWords`).
 */
export interface CorpusMessage {
  readonly key: string
  readonly from: string
  readonly subject: string
  readonly text: string
}

export const CORPUS: ReadonlyArray<CorpusMessage> = [
  { key: "invoice", from: "billing@acme-consulting.com", subject: "Invoice #4411 for March", text: "Please find attached the invoice for consulting services delivered in March. Payment is due within 30 days." },
  { key: "flight", from: "noreply@lufthansa.example", subject: "Flight to Berlin confirmed", text: "Your flight LH 2034 from Boston to Berlin departs on 14 May at 18:05. Boarding pass attached." },
  { key: "outage", from: "oncall@ops.example", subject: "Server outage last night", text: "The production database cluster went down at 02:00 and was restored at 03:30. Root cause: disk full." },
  { key: "lunch", from: "maria@team.example", subject: "Team lunch on Friday", text: "We are going to the Italian place around the corner for pizza at noon on Friday. Join us!" },
  { key: "password", from: "security@accounts.example", subject: "Your password was changed", text: "The password of your account was reset a few minutes ago. If this was not you, contact support immediately." },
  { key: "sales", from: "cfo@acme.example", subject: "Quarterly sales report", text: "Revenue grew 12% in Q3, driven by enterprise deals in Europe. Full spreadsheet attached." },
  { key: "offer", from: "hr@bigcorp.example", subject: "Job offer: senior engineer", text: "We are pleased to offer you the position of senior engineer, with a starting salary of 150k and stock options." },
  { key: "dentist", from: "frontdesk@smile.example", subject: "Dentist appointment reminder", text: "This is a reminder of your dental checkup on Tuesday at 9am with Dr. Smith." },
  { key: "package", from: "tracking@courier.example", subject: "Package delivered", text: "Your order #88123 was left at the front door by the courier at 3pm today." },
  { key: "wedding", from: "anna@family.example", subject: "Wedding invitation", text: "Anna and Tom are getting married on June 21st in Lisbon. Please RSVP by May 1st." },
  { key: "gym", from: "members@fitclub.example", subject: "Gym membership renewal", text: "Your fitness club membership expires next week. Renew now to keep access to the pool and classes." },
  { key: "lease", from: "agent@realty.example", subject: "Apartment lease", text: "The landlord sent the rental contract for the flat on Elm Street; monthly rent is 1800 dollars." },
  { key: "bug", from: "qa@shop.example", subject: "Bug in checkout page", text: "Customers report that the pay button on the checkout page does nothing on Safari. Stack trace attached." },
  { key: "garden", from: "news@greenthumb.example", subject: "Newsletter: gardening tips", text: "This week: how to grow tomatoes on a balcony, and when to prune roses." },
  { key: "tax", from: "office@cpa.example", subject: "Tax return documents", text: "Your accountant needs your W-2 forms and receipts to file this year's tax return." },
  { key: "car", from: "service@dealer.example", subject: "Car service due", text: "Your vehicle is due for an oil change and brake inspection at the dealership." },
  { key: "talk", from: "program@conf.example", subject: "Conference talk accepted", text: "Congratulations, your talk on distributed systems was accepted for the October conference in Austin." },
  { key: "party", from: "lena@friends.example", subject: "Birthday party for Mia", text: "Mia turns six on Saturday! Cake and games at our house from 2pm." },
  { key: "power", from: "statements@utility.example", subject: "Electricity bill", text: "Your power utility statement for October is ready: amount owed 94.20." },
  { key: "signin", from: "alerts@accounts.example", subject: "Security alert: new sign-in", text: "A new login to your account was detected from a Chrome browser in Madrid." }
]

/**
 * More mail on neighbouring subjects (other bills, trips, meetings, alerts), so a query has to find
 * its message among look-alikes, not just among twenty unrelated topics.
 */
export const DISTRACTORS: ReadonlyArray<CorpusMessage> = [
  { key: "d-train", from: "tickets@rail.example", subject: "Your train ticket to Paris", text: "Seat 42 in coach 7, departing Gare du Nord at 09:12. Show the QR code on board." },
  { key: "d-hotel", from: "stay@hotels.example", subject: "Hotel reservation in Rome", text: "Two nights at Hotel Aurora, check-in from 3pm, breakfast included." },
  { key: "d-standup", from: "maria@team.example", subject: "Standup moved to 10:30", text: "Tomorrow's standup starts half an hour later because of the all-hands." },
  { key: "d-offsite", from: "events@team.example", subject: "Offsite agenda", text: "Workshops in the morning, hiking in the afternoon, dinner at the lodge." },
  { key: "d-2fa", from: "noreply@auth.example", subject: "Two-factor authentication enabled", text: "You turned on two-step verification with an authenticator app." },
  { key: "d-subscription", from: "billing@streaming.example", subject: "Your subscription receipt", text: "Thanks for renewing your monthly streaming plan: 12.99 charged to your card." },
  { key: "d-refund", from: "support@shop.example", subject: "Refund processed", text: "We refunded 45.00 to your original payment method for the returned shoes." },
  { key: "d-deploy", from: "ci@ops.example", subject: "Deploy succeeded", text: "Release 4.2.1 rolled out to all regions with no errors." },
  { key: "d-latency", from: "oncall@ops.example", subject: "Elevated API latency", text: "p99 latency rose to 800ms for twenty minutes after a cache node restarted." },
  { key: "d-interview", from: "hr@bigcorp.example", subject: "Interview schedule", text: "Your onsite interviews are on Thursday: coding, system design and a chat with the team lead." },
  { key: "d-vet", from: "clinic@pets.example", subject: "Vaccination due for Rex", text: "Rex is due for his rabies shot this month. Book a slot online." },
  { key: "d-doctor", from: "clinic@health.example", subject: "Lab results available", text: "Your blood test results are ready in the patient portal." },
  { key: "d-return", from: "returns@shop.example", subject: "Return label", text: "Print the attached label and drop the box at any post office within 14 days." },
  { key: "d-reunion", from: "alumni@school.example", subject: "Class reunion", text: "Ten years already! Join us at the old campus cafe on the first Saturday of July." },
  { key: "d-insurance", from: "claims@insure.example", subject: "Claim update", text: "Your claim for the cracked windshield was approved; the glass shop will call you." },
  { key: "d-water", from: "statements@water.example", subject: "Water bill", text: "Your quarterly water statement is 61.30, due on the 15th." },
  { key: "d-mortgage", from: "loans@bank.example", subject: "Mortgage rate offer", text: "Lock in a fixed rate of 5.1% for your home loan before the end of the month." },
  { key: "d-cfp", from: "program@conf.example", subject: "Call for papers closes Friday", text: "Submit your abstract for the spring meetup before the deadline." },
  { key: "d-recipe", from: "news@kitchen.example", subject: "Weekly recipes", text: "Three quick pasta dishes and a lemon cake for the weekend." },
  { key: "d-school", from: "office@school.example", subject: "School closed Monday", text: "The building will be closed for repairs; classes resume on Tuesday." }
]

/** Queries that mean one message but share no content word with it. */
export const PARAPHRASES: ReadonlyArray<{ readonly q: string; readonly key: string }> = [
  { q: "money requested for advisory work", key: "invoice" },
  { q: "airplane trip to Germany", key: "flight" },
  { q: "website crashed overnight, systems unavailable", key: "outage" },
  { q: "colleagues eating together midday", key: "lunch" },
  { q: "my login credentials were modified", key: "password" },
  { q: "income numbers for the last three months", key: "sales" },
  { q: "employment proposal with compensation", key: "offer" },
  { q: "teeth cleaning visit", key: "dentist" },
  { q: "parcel arrived at my house", key: "package" },
  { q: "marriage ceremony guests", key: "wedding" },
  { q: "subscription to workout facility ending", key: "gym" },
  { q: "housing agreement with the property owner", key: "lease" },
  { q: "cannot complete purchase in web browser, software defect", key: "bug" },
  { q: "horticulture advice for plants and flowers", key: "garden" },
  { q: "yearly IRS paperwork", key: "tax" },
  { q: "automobile maintenance appointment", key: "car" },
  { q: "my presentation got approved for the event", key: "talk" },
  { q: "kid's celebration this weekend", key: "party" },
  { q: "energy invoice for last month", key: "power" },
  { q: "suspicious access to my profile from Spain", key: "signin" }
]

/** Queries for which exact words matter (numbers, names, a misspelling). */
export const LEXICAL_QUERIES: ReadonlyArray<{ readonly q: string; readonly key: string }> = [
  { q: "88123", key: "package" },
  { q: "Lisbon RSVP", key: "wedding" },
  { q: "invoce", key: "invoice" },
  { q: "W-2", key: "tax" },
  { q: "LH 2034", key: "flight" },
  { q: "Safari stack trace", key: "bug" },
  { q: "Elm Street", key: "lease" },
  { q: "Madrid Chrome", key: "signin" }
]

const STOP = new Set(("a an the and or of to for in on at by with my your our is are was were be been this that these those it its " +
  "from as got last me we you i s t").split(" "))

const words = (s: string) =>
  new Set(s.toLowerCase().split(/[^a-z0-9]+/).filter((w) => w.length > 0 && !STOP.has(w)).map((w) => w.replace(/(ing|ed|es|s)$/, "")))

/** Content words (crudely stemmed) a query shares with a message. */
export const sharedWords = (q: string, m: CorpusMessage) => {
  const inMessage = words(`${m.subject} ${m.text} ${m.from}`)
  return [...words(q)].filter((w) => inMessage.has(w))
}
