//! The state machines of docs/design.md ("State machines"): runner commands, webhook deliveries,
//! workflow revisions and reviews. Transitions are decided here; stores only apply them
//! atomically.

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(raw: &str) -> Result<Self, String> {
                match raw {
                    $($text => Ok($name::$variant),)+
                    _ => Err(format!(
                        "must be one of {}",
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// `queued → dispatched → running → succeeded | failed | cancelled`.
    CommandStatus {
        Queued = "queued",
        Dispatched = "dispatched",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        Cancelled = "cancelled",
    }
);

impl CommandStatus {
    /// Queued, dispatched or running: holds its pool (a delete needs `force`).
    pub fn is_open(self) -> bool {
        matches!(
            self,
            CommandStatus::Queued | CommandStatus::Dispatched | CommandStatus::Running
        )
    }

    pub const OPEN: [CommandStatus; 3] = [
        CommandStatus::Queued,
        CommandStatus::Dispatched,
        CommandStatus::Running,
    ];
}

string_enum!(
    /// `pending → received → running → succeeded | failed`.
    DeliveryStatus {
        Pending = "pending",
        Received = "received",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
    }
);

impl DeliveryStatus {
    /// The one step forward the machine allows, plus `failed` from any live state (a runner may
    /// fail before it starts). Terminal states never move; a state never moves to itself.
    pub fn can_move_to(self, to: DeliveryStatus) -> bool {
        use DeliveryStatus::*;
        matches!(
            (self, to),
            (Pending, Received)
                | (Received, Running)
                | (Running, Succeeded)
                | (Pending | Received | Running, Failed)
        )
    }

    /// The command status a delivery status implies.
    pub fn command_status(self) -> CommandStatus {
        match self {
            DeliveryStatus::Pending => CommandStatus::Queued,
            DeliveryStatus::Received => CommandStatus::Dispatched,
            DeliveryStatus::Running => CommandStatus::Running,
            DeliveryStatus::Succeeded => CommandStatus::Succeeded,
            DeliveryStatus::Failed => CommandStatus::Failed,
        }
    }
}

string_enum!(
    /// `draft → pending_approval → approved | rejected`.
    RevisionState {
        Draft = "draft",
        PendingApproval = "pending_approval",
        Approved = "approved",
        Rejected = "rejected",
    }
);

impl RevisionState {
    /// A draft is sent for approval once; a pending revision is decided once, approved or
    /// rejected. Decided revisions never move.
    pub fn can_move_to(self, to: RevisionState) -> bool {
        use RevisionState::*;
        matches!(
            (self, to),
            (Draft, PendingApproval) | (PendingApproval, Approved | Rejected)
        )
    }
}

string_enum!(
    /// Decided by the moderation policy.
    ReviewStatus {
        Published = "published",
        Held = "held",
        Rejected = "rejected",
        Hidden = "hidden",
    }
);

string_enum!(
    ReportReason {
        Spam = "spam",
        Abuse = "abuse",
        OffTopic = "off_topic",
        Other = "other",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_machine_moves_forward_only() {
        use DeliveryStatus::*;
        let allowed: Vec<(DeliveryStatus, DeliveryStatus)> = DeliveryStatus::ALL
            .iter()
            .flat_map(|a| DeliveryStatus::ALL.iter().map(move |b| (*a, *b)))
            .filter(|(a, b)| a.can_move_to(*b))
            .collect();
        assert_eq!(
            allowed,
            vec![
                (Pending, Received),
                (Pending, Failed),
                (Received, Running),
                (Received, Failed),
                (Running, Succeeded),
                (Running, Failed),
            ]
        );
    }

    #[test]
    fn a_revision_is_requested_then_decided_once() {
        use RevisionState::*;
        let allowed: Vec<(RevisionState, RevisionState)> = RevisionState::ALL
            .iter()
            .flat_map(|a| RevisionState::ALL.iter().map(move |b| (*a, *b)))
            .filter(|(a, b)| a.can_move_to(*b))
            .collect();
        assert_eq!(
            allowed,
            vec![
                (Draft, PendingApproval),
                (PendingApproval, Approved),
                (PendingApproval, Rejected),
            ]
        );
    }

    #[test]
    fn names_round_trip() {
        for s in CommandStatus::ALL {
            assert_eq!(CommandStatus::parse(s.as_str()), Ok(*s));
        }
        assert!(ReportReason::parse("rude").is_err());
        assert_eq!(ReportReason::parse("off_topic"), Ok(ReportReason::OffTopic));
    }
}
