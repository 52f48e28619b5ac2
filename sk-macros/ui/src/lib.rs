//! The compile-time tests of `#[job]` (`tests/ui.rs`); this library is empty.
