"""The default moderator in Python: rejects or holds reviews on clear signals, and hides a
review once three distinct users have reported it.

A port, rule for rule, of policies/moderation/src/lib.rs; it passes the same
policies/moderation/cases.json. Python's str.isalpha/isupper/isalnum stand for Rust's Unicode
Alphabetic/Uppercase/alphanumeric properties; they agree on every cased script and digit.
"""

from typing import List, Optional

import wit_world
from wit_world.imports.types import ModerationDecision, ModerationRequest, Verdict

# Distinct reporters, other than the author, that hide a review.
HIDE_AFTER_REPORTERS = 3
# A run of one character this long is noise.
MAX_REPEAT = 6


def decision(verdict: Verdict, reason: str, label: str) -> ModerationDecision:
    return ModerationDecision(verdict, [reason], [label])


def ascii_lower(text: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def links(text: str) -> int:
    lower = ascii_lower(text)
    return sum(lower.count(p) for p in ("http://", "https://", "www."))


def contact_details(text: str) -> bool:
    """An email address or a phone-like run of digits."""
    email = False
    for word in text.split():
        user, at, domain = word.partition("@")
        if at and user and "." in domain and not domain.endswith("."):
            email = True
            break
    digits = 0
    longest = 0
    for c in text:
        if "0" <= c <= "9":
            digits += 1
            longest = max(longest, digits)
        elif c not in " -.()+":
            digits = 0
    return email or longest >= 9


def shouting(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    upper = sum(1 for c in letters if c.isupper())
    return len(letters) >= 12 and upper * 10 >= len(letters) * 8


def repeated_characters(text: str) -> bool:
    run = 0
    previous = None
    for c in text:
        if c.isspace():
            continue
        run = run + 1 if c == previous else 1
        previous = c
        if run >= MAX_REPEAT:
            return True
    return False


def blocked(text: str, blocklist: List[str]) -> Optional[str]:
    words = set()
    word = []
    for c in text.lower() + " ":
        if c.isalnum():
            word.append(c)
        elif word:
            words.add("".join(word))
            word = []
    return next((b for b in blocklist if b and b in words), None)


def debug_quoted(word: str) -> str:
    # Rust's {:?} of a string, for the characters a blocklist word can hold.
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


class WitWorld(wit_world.WitWorld):
    def moderate(self, request: ModerationRequest) -> ModerationDecision:
        review = request.review
        if request.report is not None:
            reporters = {r.reporter_id for r in request.prior_reports}
            reporters.add(request.report.reporter_id)
            reporters.discard(review.author_id)
            if len(reporters) >= HIDE_AFTER_REPORTERS:
                return decision(Verdict.HIDE, f"reported by {len(reporters)} users", "reported")
        if not 1 <= review.rating <= 5:
            return decision(Verdict.REJECT, "the rating must be 1 to 5", "invalid-rating")
        text = f"{review.title}\n{review.body}"
        word = blocked(text, request.blocklist)
        if word is not None:
            return decision(Verdict.REJECT, f"contains the blocked word {debug_quoted(word)}", "blocklisted")
        count = links(text)
        if count == 1:
            return decision(Verdict.HOLD, "contains a link", "link")
        if count > 1:
            return decision(Verdict.REJECT, "contains several links", "link-spam")
        if contact_details(text):
            return decision(Verdict.HOLD, "contains contact details", "contact-details")
        if shouting(text):
            return decision(Verdict.HOLD, "mostly capital letters", "shouting")
        if repeated_characters(text):
            return decision(Verdict.HOLD, "long runs of one character", "repeated-characters")
        return ModerationDecision(Verdict.PUBLISH, [], [])
