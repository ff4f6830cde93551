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

pub use api::{Report, Simulation};
/// The checkers, which judge records alone (their own crate).
pub use leasesim_check as check;
/// Ground truth, in the vocabulary every engine is described in.
pub use leasesim_vocab::truth;
pub use leasesim_world::{engine, faults, history, logs, outcome, runner, world};

/// Scenarios; loading one first makes the engines this crate ships known.
pub mod scenario {
    pub use leasesim_world::scenario::*;

    /// Parses and validates a scenario (see `leasesim_world::scenario::parse`).
    pub fn parse(text: &str) -> Result<Scenario, String> {
        crate::engines();
        leasesim_world::scenario::parse(text)
    }

    /// Resolves a built-in scenario name or a path, and loads it.
    pub fn resolve(name_or_path: &str) -> Result<Loaded, String> {
        crate::engines();
        leasesim_world::scenario::resolve(name_or_path)
    }

    pub fn load(path: &std::path::Path) -> Result<Loaded, String> {
        crate::engines();
        leasesim_world::scenario::load(path)
    }

    /// The built-in scenarios of the built-in engine (what `--scenario all`
    /// runs), sorted.
    pub fn builtin_engine_names() -> Vec<String> {
        names_of_engine(crate::engine::DEFAULT_ENGINE)
    }

    /// The built-in scenarios that run `engine`, sorted.
    pub fn names_of_engine(engine: &str) -> Vec<String> {
        builtin_names()
            .into_iter()
            .filter(|name| resolve(name).is_ok_and(|l| l.scenario.engine.get().name() == engine))
            .collect()
    }

    /// Deserializes TOML into `T` (a scenario or corpus entry may name an engine).
    pub fn from_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
        crate::engines();
        leasesim_world::scenario::from_toml(text)
    }
}

/// Makes the engines this crate ships with known by name (idempotent).
pub fn engines() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        leasesim_builtin::register();
        leasesim_graphile::register();
        leasesim_apalis::register();
    });
}

/// `name`, if some known engine has a defect switch of that name (each run
/// checks its own engine's); else one line listing the known ones.
pub fn known_defect(name: &str) -> Result<String, String> {
    engines();
    let known: Vec<&str> = engine::known().iter().flat_map(|a| a.switches()).map(|(name, _)| name).collect();
    if known.contains(&name) {
        Ok(name.to_string())
    } else {
        Err(format!("unknown defect '{name}' (known: {})", known.join(", ")))
    }
}
