//! A moderation as the service layer asks it and as the policy answers it, and the conversions
//! to and from the moderator world's WIT types.

use super::wit::moderation_types;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Publish,
    Hold,
    Reject,
    Hide,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Publish => "published",
            Verdict::Hold => "held",
            Verdict::Reject => "rejected",
            Verdict::Hide => "hidden",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModerationOutcome {
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    pub labels: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ReportInput {
    pub reporter_id: String,
    /// spam, abuse, off_topic or other
    pub reason: String,
    pub comment: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ModerationInput {
    pub review_id: String,
    pub plugin_id: String,
    pub author_id: String,
    pub rating: u8,
    pub title: String,
    pub body: String,
    pub report: Option<ReportInput>,
    pub prior_reports: Vec<ReportInput>,
    pub blocklist: Vec<String>,
}

fn report_to_wit(r: &ReportInput) -> moderation_types::Report {
    use moderation_types::ReportReason;
    moderation_types::Report {
        reporter_id: r.reporter_id.clone(),
        reason: match r.reason.as_str() {
            "spam" => ReportReason::Spam,
            "abuse" => ReportReason::Abuse,
            "off_topic" => ReportReason::OffTopic,
            _ => ReportReason::Other,
        },
        comment: r.comment.clone(),
    }
}

impl ModerationInput {
    pub(super) fn to_wit(&self) -> moderation_types::ModerationRequest {
        moderation_types::ModerationRequest {
            review: moderation_types::Review {
                id: self.review_id.clone(),
                plugin_id: self.plugin_id.clone(),
                author_id: self.author_id.clone(),
                rating: self.rating,
                title: self.title.clone(),
                body: self.body.clone(),
            },
            report: self.report.as_ref().map(report_to_wit),
            prior_reports: self.prior_reports.iter().map(report_to_wit).collect(),
            blocklist: self.blocklist.clone(),
        }
    }
}

pub(crate) fn outcome(decision: moderation_types::ModerationDecision) -> ModerationOutcome {
    use moderation_types::Verdict as W;
    ModerationOutcome {
        verdict: match decision.verdict {
            W::Publish => Verdict::Publish,
            W::Hold => Verdict::Hold,
            W::Reject => Verdict::Reject,
            W::Hide => Verdict::Hide,
        },
        reasons: decision.reasons,
        labels: decision.labels,
    }
}
