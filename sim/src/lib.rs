//! leasesim's campaigns: fuzzing many seeds, the corpus of saved runs,
//! shrinking, benchmarks, pictures of a run, and the CLI (`cargo sim`).
//!
//! The world, its seams and the runner of one seed are `leasesim-world`;
//! the checkers `leasesim-check`; the vocabulary `leasesim-vocab`; each
//! engine under test comes in through its adapter (`sim/engines/`). This
//! crate knows the engines it ships with ([`engines`]). [`Simulation`] is
//! the way in for simulation tests written in Rust (see the `api` module).

#[cfg(not(madsim))]
compile_error!("leasesim-sim needs `--cfg madsim`: set `[build] rustflags = [\"--cfg\", \"madsim\"]` in .cargo/config.toml (this repository's does), and no RUSTFLAGS variable, which overrides it even when empty");

pub mod api;
pub mod bench;
pub mod bench_judge;
pub mod bench_suite;
pub mod cli;
pub mod corpus;
pub mod export;
pub mod fuzz;
pub mod guided;
pub mod mem;
pub mod shrink;

pub use api::{Report, Run, Simulation};
/// The checkers, which judge records alone (their own crate).
pub use leasesim_check as check;
/// Ground truth, in the vocabulary every engine is described in.
pub use leasesim_vocab::truth;
pub use leasesim_world::{engine, faults, history, logs, outcome, runner, world};

pub use leasesim_world::engine::Engines;

/// Scenarios (parsing one needs no engines; loading one configures its
/// engine from the [`Engines`] given).
pub mod scenario {
    pub use leasesim_world::scenario::*;

    /// The built-in scenarios of the built-in engine (what `--scenario all`
    /// runs), sorted.
    pub fn builtin_engine_names() -> Vec<String> {
        names_of_engine(crate::engine::DEFAULT_ENGINE)
    }

    /// The built-in scenarios that run `engine`, sorted (read as written: no
    /// engine need be known).
    pub fn names_of_engine(engine: &str) -> Vec<String> {
        builtin_names()
            .into_iter()
            .filter(|name| {
                let path = builtin_dir().join(format!("{name}.toml"));
                let text = std::fs::read_to_string(path).unwrap_or_default();
                parse(&text).is_ok_and(|s| s.engine.name() == engine)
            })
            .collect()
    }
}

/// The engines this crate ships with: the built-in one, and graphile_worker
/// and apalis-redis unless their cargo features (`graphile`, `apalis`, on by
/// default) are off. A crate testing its own engine adds it:
/// `leasesim_sim::engines().with(my_adapter())`.
pub fn engines() -> Engines {
    let engines = Engines::new().with(leasesim_builtin::adapter());
    #[cfg(feature = "graphile")]
    let engines = engines.with(leasesim_graphile::adapter());
    #[cfg(feature = "apalis")]
    let engines = engines.with(leasesim_apalis::adapter());
    engines
}
