//! When each background task last completed a pass, published on `/metrics` as
//! `background_pass_started_seconds{task}`: the server's clock when the last successful pass
//! began. An operator sees a stalled task (the value stops moving); a test waits for a pass
//! that began after a moment to know the pass could have acted on whatever was due by then,
//! instead of sleeping and hoping it ran.

use chrono::{DateTime, Utc};
use prometheus::{GaugeVec, Opts};

/// The tasks that record their passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackgroundTask {
    /// The dispatcher's look for due webhook deliveries.
    Deliveries,
    /// The sweep failing overdue runner commands.
    CommandTimeouts,
    /// The pass giving tokens near their expiry their notice.
    TokenExpiryNotices,
}

impl BackgroundTask {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deliveries => "deliveries",
            Self::CommandTimeouts => "command_timeouts",
            Self::TokenExpiryNotices => "token_expiry_notices",
        }
    }
}

/// The gauge of last completed passes, one series per task.
pub struct BackgroundPasses {
    started: GaugeVec,
}

impl BackgroundPasses {
    pub fn new() -> Self {
        let started = GaugeVec::new(
            Opts::new(
                "background_pass_started_seconds",
                "When the last completed pass of each background task began (Unix seconds)",
            ),
            &["task"],
        )
        // The name and label are constants: this cannot fail.
        .unwrap_or_else(|e| unreachable!("background pass gauge: {e}"));
        Self { started }
    }

    /// Notes that a pass of `task` which began at `started` completed.
    pub fn completed(&self, task: BackgroundTask, started: DateTime<Utc>) {
        let seconds = started.timestamp_micros() as f64 / 1e6;
        let gauge = self.started.with_label_values(&[task.as_str()]);
        // Passes of one task may overlap (a batch follows another at once); keep the latest.
        if seconds > gauge.get() {
            gauge.set(seconds);
        }
    }

    /// The gauge to publish on `/metrics`.
    pub fn collector(&self) -> Box<dyn prometheus::core::Collector> {
        Box::new(self.started.clone())
    }
}

impl Default for BackgroundPasses {
    fn default() -> Self {
        Self::new()
    }
}
