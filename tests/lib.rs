//! Integration tests live in `api/`; this crate has no library code.
