//! What `cpctl` shares with its tests: the example runner (`cpctl runners serve`).

pub mod runner;
