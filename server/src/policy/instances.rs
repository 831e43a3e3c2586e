//! How a policy version's decisions get their instances: a fresh one for every decision (the
//! default: nothing survives a decision), or warm ones kept per organisation (`warm.rs`).

/// Chosen at install and kept with the version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Instances {
    /// A new instance for every decision.
    #[default]
    Fresh,
    /// Warm instances, each serving the decisions of one organisation only, replaced after a
    /// bounded number of decisions and seconds and discarded after any failure.
    PerOrganisation,
}

impl Instances {
    pub const ALL: [Instances; 2] = [Instances::Fresh, Instances::PerOrganisation];

    pub fn as_str(self) -> &'static str {
        match self {
            Instances::Fresh => "fresh",
            Instances::PerOrganisation => "per-organisation",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "fresh" => Ok(Instances::Fresh),
            "per-organisation" => Ok(Instances::PerOrganisation),
            other => Err(format!(
                "unknown instances mode {other:?}: expected fresh or per-organisation"
            )),
        }
    }
}

impl std::fmt::Display for Instances {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
