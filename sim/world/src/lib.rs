//! leasesim's world: seeded simulated worlds that run an engine under test
//! behind the harness's seams, inject faults and record what happened, in
//! the harness's vocabulary; and the runner that isolates, runs and judges
//! one seed.
//!
//! The world is generic over [`engine::EngineUnderTest`]; an engine comes
//! in through its adapter ([`engine::Adapter`], registered by name). The
//! campaign layer (fuzz, corpus, shrink, the CLI) is `leasesim-sim`.

#[cfg(not(madsim))]
compile_error!(
    "leasesim-world needs `--cfg madsim`: set `[build] rustflags = [\"--cfg\", \"madsim\"]` in .cargo/config.toml (this repository's does), and no RUSTFLAGS variable, which overrides it even when empty"
);

pub mod engine;
pub mod faults;
pub mod history;
pub mod logs;
pub mod outcome;
pub mod ranges;
pub mod runner;
pub mod scenario;
pub mod self_check;
pub mod world;

/// The checkers, which judge records alone (their own crate).
pub use leasesim_check as check;
/// The vocabulary every engine is described in.
pub use leasesim_vocab as vocab;
/// Ground truth, in that vocabulary.
pub use leasesim_vocab::truth;
