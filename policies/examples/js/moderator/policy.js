// The default moderator in JavaScript: rejects or holds reviews on clear signals, and hides a
// review once three distinct users have reported it. A port, rule for rule, of
// policies/moderation/src/lib.rs; it passes the same policies/moderation/cases.json.

// Distinct reporters, other than the author, that hide a review.
const HIDE_AFTER_REPORTERS = 3;
// A run of one character this long is noise.
const MAX_REPEAT = 6;

// componentize-js's engine is built without ICU, so regular expressions have no Unicode
// property classes (\p{...} is a syntax error). Case mapping works: a letter here is a
// character with an upper and a lower case, which Rust's is_alphabetic also counts; scripts
// without case (CJK, Arabic, ...) are not letters here.
const isLetter = (c) => c.toLowerCase() !== c.toUpperCase();
const isUpper = (c) => isLetter(c) && c === c.toUpperCase();
const isWhitespace = (c) => /^\s$/.test(c);
const isAlphanumeric = (c) => isLetter(c) || (c >= "0" && c <= "9");

function decision(verdict, reason, label) {
  return { verdict, reasons: [reason], labels: [label] };
}

function asciiLower(text) {
  return text.replace(/[A-Z]/g, (c) => c.toLowerCase());
}

function count(haystack, needle) {
  let n = 0;
  for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + needle.length)) {
    n += 1;
  }
  return n;
}

function links(text) {
  const lower = asciiLower(text);
  return ["http://", "https://", "www."].reduce((sum, p) => sum + count(lower, p), 0);
}

// An email address or a phone-like run of digits.
function contactDetails(text) {
  const words = text.split(/\s+/).filter((w) => w !== "");
  const email = words.some((word) => {
    const at = word.indexOf("@");
    if (at === -1) return false;
    const domain = word.slice(at + 1);
    return at > 0 && domain.includes(".") && !domain.endsWith(".");
  });
  let digits = 0;
  let longest = 0;
  for (const c of text) {
    if (c >= "0" && c <= "9") {
      digits += 1;
      longest = Math.max(longest, digits);
    } else if (!" -.()+".includes(c)) {
      digits = 0;
    }
  }
  return email || longest >= 9;
}

function shouting(text) {
  const letters = [...text].filter((c) => isLetter(c));
  const upper = letters.filter((c) => isUpper(c)).length;
  return letters.length >= 12 && upper * 10 >= letters.length * 8;
}

function repeatedCharacters(text) {
  let run = 0;
  let previous = null;
  for (const c of text) {
    if (isWhitespace(c)) continue;
    run = c === previous ? run + 1 : 1;
    previous = c;
    if (run >= MAX_REPEAT) return true;
  }
  return false;
}

function blocked(text, blocklist) {
  const words = new Set();
  let word = "";
  for (const c of text.toLowerCase() + " ") {
    if (isAlphanumeric(c)) {
      word += c;
    } else if (word !== "") {
      words.add(word);
      word = "";
    }
  }
  return blocklist.find((b) => b !== "" && words.has(b));
}

export function moderate(request) {
  const review = request.review;
  if (request.report !== undefined && request.report !== null) {
    const reporters = new Set(request.priorReports.map((r) => r.reporterId));
    reporters.add(request.report.reporterId);
    reporters.delete(review.authorId);
    if (reporters.size >= HIDE_AFTER_REPORTERS) {
      return decision("hide", `reported by ${reporters.size} users`, "reported");
    }
  }
  if (!(review.rating >= 1 && review.rating <= 5)) {
    return decision("reject", "the rating must be 1 to 5", "invalid-rating");
  }
  const text = `${review.title}\n${review.body}`;
  const word = blocked(text, request.blocklist);
  if (word !== undefined) {
    return decision("reject", `contains the blocked word ${JSON.stringify(word)}`, "blocklisted");
  }
  const found = links(text);
  if (found === 1) return decision("hold", "contains a link", "link");
  if (found > 1) return decision("reject", "contains several links", "link-spam");
  if (contactDetails(text)) return decision("hold", "contains contact details", "contact-details");
  if (shouting(text)) return decision("hold", "mostly capital letters", "shouting");
  if (repeatedCharacters(text)) return decision("hold", "long runs of one character", "repeated-characters");
  return { verdict: "publish", reasons: [], labels: [] };
}
