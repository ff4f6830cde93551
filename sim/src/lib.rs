//! leasesim's harness: seeded simulated worlds that run the engine, inject
//! faults, record the event history and check invariants against it.
//!
//! The CLI (`cargo sim`) is one way in; [`Simulation`] is the other, for
//! simulation tests written in Rust (see the `api` module).

#[cfg(not(madsim))]
compile_error!("leasesim-sim needs `--cfg madsim` (set by .cargo/config.toml); is RUSTFLAGS set in your environment?");

pub mod api;
pub mod bench;
pub mod bench_suite;
pub mod cli;
pub mod corpus;
pub mod export;
pub mod faults;
pub mod fuzz;
pub mod guided;
pub mod history;
pub mod logs;
pub mod mem;
pub mod outcome;
pub mod runner;
pub mod scenario;
pub mod shrink;
pub mod world;

pub use api::{Report, Simulation};
/// The checkers, which judge records alone (their own crate).
pub use leasesim_check as check;
/// Ground truth, in the vocabulary every engine is described in.
pub use leasesim_vocab::truth;
