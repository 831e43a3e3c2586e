//! The default moderation policy: rejects or holds reviews on clear signals, and hides a review
//! once three distinct users have reported it.

wit_bindgen::generate!({ world: "moderator", path: "../wit" });

use control_plane::policy::types::Verdict;

struct Moderation;

/// Distinct reporters, other than the author, that hide a review.
const HIDE_AFTER_REPORTERS: usize = 3;
/// A run of one character this long is noise.
const MAX_REPEAT: usize = 6;

fn decision(verdict: Verdict, reason: &str, label: &str) -> ModerationDecision {
    ModerationDecision { verdict, reasons: vec![reason.into()], labels: vec![label.into()] }
}

fn links(text: &str) -> usize {
    let lower = text.to_ascii_lowercase();
    ["http://", "https://", "www."].iter().map(|p| lower.matches(p).count()).sum()
}

/// An email address or a phone-like run of digits.
fn contact_details(text: &str) -> bool {
    let email = text.split_whitespace().any(|word| {
        word.split_once('@').is_some_and(|(user, domain)| !user.is_empty() && domain.contains('.') && !domain.ends_with('.'))
    });
    let mut digits = 0;
    let mut longest = 0;
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits += 1;
            longest = longest.max(digits);
        } else if !matches!(c, ' ' | '-' | '.' | '(' | ')' | '+') {
            digits = 0;
        }
    }
    email || longest >= 9
}

fn shouting(text: &str) -> bool {
    let letters: Vec<char> = text.chars().filter(|c| c.is_alphabetic()).collect();
    let upper = letters.iter().filter(|c| c.is_uppercase()).count();
    letters.len() >= 12 && upper * 10 >= letters.len() * 8
}

fn repeated_characters(text: &str) -> bool {
    let mut run = 0;
    let mut previous = None;
    for c in text.chars().filter(|c| !c.is_whitespace()) {
        run = if Some(c) == previous { run + 1 } else { 1 };
        previous = Some(c);
        if run >= MAX_REPEAT {
            return true;
        }
    }
    false
}

fn blocked(text: &str, blocklist: &[String]) -> Option<String> {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    blocklist.iter().find(|b| !b.is_empty() && words.iter().any(|w| w == &b.as_str())).cloned()
}

impl Guest for Moderation {
    fn moderate(request: ModerationRequest) -> ModerationDecision {
        let review = &request.review;
        if let Some(report) = &request.report {
            let mut reporters: Vec<&str> = request.prior_reports.iter().map(|r| r.reporter_id.as_str()).collect();
            reporters.push(report.reporter_id.as_str());
            reporters.retain(|r| *r != review.author_id);
            reporters.sort_unstable();
            reporters.dedup();
            if reporters.len() >= HIDE_AFTER_REPORTERS {
                return decision(Verdict::Hide, &format!("reported by {} users", reporters.len()), "reported");
            }
        }
        if !(1..=5).contains(&review.rating) {
            return decision(Verdict::Reject, "the rating must be 1 to 5", "invalid-rating");
        }
        let text = format!("{}\n{}", review.title, review.body);
        if let Some(word) = blocked(&text, &request.blocklist) {
            return decision(Verdict::Reject, &format!("contains the blocked word {word:?}"), "blocklisted");
        }
        match links(&text) {
            0 => {}
            1 => return decision(Verdict::Hold, "contains a link", "link"),
            _ => return decision(Verdict::Reject, "contains several links", "link-spam"),
        }
        if contact_details(&text) {
            return decision(Verdict::Hold, "contains contact details", "contact-details");
        }
        if shouting(&text) {
            return decision(Verdict::Hold, "mostly capital letters", "shouting");
        }
        if repeated_characters(&text) {
            return decision(Verdict::Hold, "long runs of one character", "repeated-characters");
        }
        ModerationDecision { verdict: Verdict::Publish, reasons: vec![], labels: vec![] }
    }
}

export!(Moderation);
