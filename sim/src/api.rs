//! Simulation tests in Rust: a builder over the campaign code that `cargo
//! sim fuzz` runs, for tests that live next to an engine.
//!
//! A [`Simulation`] is a scenario (a built-in by name, or a [`Scenario`]
//! built in code), the seeds to run it on, where each seed's faults come
//! from, the defect switches and a few knobs. [`Simulation::run`] runs every
//! seed (each in its own fresh world, as `cargo sim` does) and answers a
//! [`Report`]: every run's outcome, the campaign's [`Summary`], and the
//! failures with the lines that replay them. [`Report::assert_passes`]
//! panics listing every failure.
//!
//! ```no_run
//! use leasesim_sim::Simulation;
//!
//! // Seeds 1..=20 of the built-in b-machines, faults drawn from each seed.
//! let report = Simulation::scenario("b-machines").seeds(1..=20).run();
//! report.assert_passes();
//! assert_eq!(report.runs.len(), 20);
//! ```
//!
//! `tests/api.rs` builds a whole world in code; README.md ("Writing
//! simulation tests in Rust") shows it.

use crate::corpus;
use crate::faults::FaultPlan;
use crate::fuzz::{self, Campaign, Failure, SeedSpace, Summary, Target};
use crate::outcome::Outcome;
use crate::runner::{self, PlanSource, RunError};
use crate::scenario::{self, Scenario};
use std::ops::{Range, RangeInclusive};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The seeds a [`Simulation`] runs: a count `n` (seeds `1..=n`), a range
/// `a..b` or an inclusive range `a..=b`.
pub trait IntoSeeds {
    /// The seeds as `start..end` (end excluded).
    fn span(self) -> (u64, u64);
}

impl IntoSeeds for u64 {
    fn span(self) -> (u64, u64) {
        (1, self.saturating_add(1))
    }
}

impl IntoSeeds for Range<u64> {
    fn span(self) -> (u64, u64) {
        (self.start, self.end)
    }
}

impl IntoSeeds for RangeInclusive<u64> {
    fn span(self) -> (u64, u64) {
        (*self.start(), self.end().saturating_add(1))
    }
}

/// A simulation test: what to run, on which seeds, with which faults. Build
/// it with [`Simulation::scenario`] or [`Simulation::from_scenario`], then
/// [`run`](Simulation::run) it.
#[derive(Debug, Clone)]
pub struct Simulation {
    target: Target,
    /// Built in code: no `cargo sim run --scenario` can name it.
    in_code: bool,
    seeds: (u64, u64),
    plan: PlanSource,
    defects: Vec<String>,
    watchdog: Duration,
    jobs: usize,
    save: Option<PathBuf>,
}

impl Simulation {
    /// A built-in scenario (`cargo sim list`) or a scenario TOML path.
    ///
    /// # Panics
    /// If there is no such scenario or the file is not a valid one (see
    /// [`Simulation::try_scenario`] for an error instead).
    pub fn scenario(name_or_path: &str) -> Simulation {
        Simulation::try_scenario(name_or_path).unwrap_or_else(|e| panic!("Simulation::scenario: {e}"))
    }

    /// As [`Simulation::scenario`], answering an error instead of panicking.
    pub fn try_scenario(name_or_path: &str) -> Result<Simulation, String> {
        Simulation::try_scenario_with(name_or_path, &crate::engines())
    }

    /// As [`Simulation::try_scenario`], the scenario's engine one of
    /// `engines` (`leasesim_sim::engines().with(my_engine::adapter())`).
    pub fn try_scenario_with(name_or_path: &str, engines: &crate::Engines) -> Result<Simulation, String> {
        Ok(Simulation::of(Target::resolve(name_or_path, engines)?, false))
    }

    /// A scenario built in code (its `name` names it in reports).
    ///
    /// # Panics
    /// If the scenario describes no real world (`scenario::validate`: the
    /// message names the field and the allowed range).
    pub fn from_scenario(scenario: Scenario) -> Simulation {
        Simulation::from_scenario_with(scenario, &crate::engines())
    }

    /// As [`Simulation::from_scenario`], an `[engine]` still as written
    /// configured from `engines`.
    pub fn from_scenario_with(mut scenario: Scenario, engines: &crate::Engines) -> Simulation {
        let checked = scenario::configure(&mut scenario, engines).and_then(|()| scenario::validate(&scenario));
        if let Err(e) = checked {
            panic!("Simulation::from_scenario({}): {e}", scenario.name);
        }
        let target = Target { arg: scenario.name.clone(), scenario: Arc::new(scenario) };
        Simulation::of(target, true)
    }

    fn of(target: Target, in_code: bool) -> Simulation {
        Simulation {
            target,
            in_code,
            seeds: (1, 11),
            plan: PlanSource::Swarm,
            defects: Vec::new(),
            watchdog: runner::DEFAULT_WATCHDOG,
            jobs: fuzz::default_jobs(),
            save: None,
        }
    }

    /// Runs the scenario's world with `engine` in place of the engine it
    /// names: its workload, topology, phases and faults stay (an adapter's
    /// `configure`, e.g. `leasesim_builtin::section`, makes one). The
    /// scenario is then one built in code: its replay lines name no file.
    ///
    /// # Panics
    /// If the engine refuses the scenario (`Engine::validate`).
    pub fn engine(self, engine: Arc<dyn crate::engine::Engine>) -> Simulation {
        self.try_engine(engine).unwrap_or_else(|e| panic!("Simulation::engine: {e}"))
    }

    /// As [`Simulation::engine`], answering an error instead of panicking.
    pub fn try_engine(mut self, engine: Arc<dyn crate::engine::Engine>) -> Result<Simulation, String> {
        let mut scenario = (*self.target.scenario).clone();
        scenario.engine = scenario::EngineSection::new(engine);
        scenario::validate(&scenario).map_err(|e| format!("{}: {e}", scenario.name))?;
        self.target = Target { arg: scenario.name.clone(), scenario: Arc::new(scenario) };
        self.in_code = true;
        Ok(self)
    }

    /// The seeds to run: a count `n` (seeds `1..=n`), `a..b` or `a..=b`.
    /// Default: seeds `1..=10`.
    pub fn seeds(mut self, seeds: impl IntoSeeds) -> Simulation {
        self.seeds = seeds.span();
        self
    }

    /// Exactly one seed (to replay a failure).
    pub fn seed(self, seed: u64) -> Simulation {
        self.seeds(seed..=seed)
    }

    /// Turns a defect switch on (each re-creates a real bug; all off is the
    /// correct engine). Can be called again for several.
    pub fn defect(mut self, defect: impl ToString) -> Simulation {
        self.defects.push(defect.to_string());
        self.defects.sort();
        self.defects.dedup();
        self
    }

    /// Turns every defect switch of `defects` on.
    pub fn defects<D: ToString>(mut self, defects: impl IntoIterator<Item = D>) -> Simulation {
        for defect in defects {
            self = self.defect(defect);
        }
        self
    }

    /// Plays this fault plan on every seed instead of drawing one per seed.
    pub fn plan(mut self, plan: FaultPlan) -> Simulation {
        self.plan = PlanSource::Explicit(plan);
        self
    }

    /// No faults at all (the default draws a plan from each seed: swarm).
    pub fn no_faults(mut self) -> Simulation {
        self.plan = PlanSource::None;
        self
    }

    /// A fault plan drawn from each seed, within the scenario's `[faults]`
    /// limits (the default).
    pub fn swarm_faults(mut self) -> Simulation {
        self.plan = PlanSource::Swarm;
        self
    }

    /// The wall-clock time one seed may take before it counts as a hang
    /// (default: [`runner::DEFAULT_WATCHDOG`]).
    pub fn watchdog(mut self, watchdog: Duration) -> Simulation {
        self.watchdog = watchdog;
        self
    }

    /// Seeds run at once (default: one per core). Results do not depend on it.
    pub fn jobs(mut self, jobs: usize) -> Simulation {
        self.jobs = jobs.max(1);
        self
    }

    /// Saves each failing run as a corpus entry in [`corpus::failures_dir`]
    /// (`target/leasesim-failures/`), replayable with `cargo sim replay FILE`.
    pub fn save_failures(self) -> Simulation {
        self.save_failures_in(corpus::failures_dir())
    }

    /// Saves each failing run as a corpus entry in `dir` (atomically, its
    /// plan and world written out; an identical entry is reused, nothing is
    /// overwritten).
    pub fn save_failures_in(mut self, dir: impl Into<PathBuf>) -> Simulation {
        self.save = Some(dir.into());
        self
    }

    /// The campaign this simulation is.
    pub fn campaign(&self) -> Campaign {
        Campaign {
            targets: vec![self.target.clone()],
            seeds: SeedSpace::range(self.seeds.0, Some(self.seeds.1.max(self.seeds.0))),
            deadline: None,
            jobs: self.jobs,
            plan: self.plan.clone(),
            watchdog: self.watchdog,
            defects: self.defects.clone(),
            sabotage: None,
        }
    }

    /// Runs every seed; the report holds every run in seed order.
    ///
    /// # Panics
    /// If an explicit plan ([`Simulation::plan`]) does not fit the world (a
    /// process it does not have, a time past the fault phase).
    pub fn run(&self) -> Report {
        if let PlanSource::Explicit(plan) = &self.plan {
            let s = &self.target.scenario;
            if let Err(e) = plan.validate(s.topology.workers, s.phases.fault_phase_ms) {
                panic!("Simulation::plan: {e}");
            }
        }
        let campaign = self.campaign();
        let stop = AtomicBool::new(false);
        let mut runs: Vec<(u64, Run)> = Vec::new();
        let summary = fuzz::run(&campaign, &stop, |p| {
            let failure = fuzz::failure_of(p.spec, p.last).map(|f| self.replayable(f));
            let saved = match (&failure, &self.save) {
                (Some(f), Some(dir)) => {
                    let comment = format!("found by a simulation test, `leasesim_sim::Simulation`: {}", f.message);
                    Some(corpus::save_failure(dir, p.spec, &f.invariant, comment))
                }
                _ => None,
            };
            let run = Run { seed: p.spec.seed, result: p.last.clone(), failure, saved };
            runs.push((p.index, run));
        });
        runs.sort_by_key(|(index, _)| *index);
        let mut summary = summary;
        for f in &mut summary.failures {
            *f = self.replayable(f.clone());
        }
        Report {
            scenario: self.target.scenario.name.clone(),
            runs: runs.into_iter().map(|(_, r)| r).collect(),
            summary,
        }
    }

    /// A failure whose replay line works: a scenario built in code has no
    /// `cargo sim run` line, only this builder with `.seed(N)` (or the saved
    /// entry).
    fn replayable(&self, mut f: Failure) -> Failure {
        if self.in_code {
            f.replay = format!("Simulation::from_scenario(..).seed({}) (a scenario built in code)", f.seed);
        }
        f
    }
}

/// One seed's run.
#[derive(Debug, Clone)]
pub struct Run {
    pub seed: u64,
    /// The outcome, or how the seed failed to finish (panic, hang, limit).
    pub result: Result<Outcome, RunError>,
    /// Set when the run failed: its first violation (or how it did not finish).
    pub failure: Option<Failure>,
    /// Where the failure was saved (with `save_failures`), or why it was not.
    pub saved: Option<Result<PathBuf, String>>,
}

impl Run {
    /// The lines a failure is reported with: the `FAIL` line a campaign
    /// prints (with its `cargo sim run` replay line), then where it was
    /// saved (`cargo sim replay FILE`). Empty when the run passed.
    pub fn failure_lines(&self) -> Vec<String> {
        let Some(f) = &self.failure else { return Vec::new() };
        let mut lines = vec![f.line()];
        match &self.saved {
            Some(Ok(path)) => lines.push(fuzz::saved_line(path)),
            Some(Err(e)) => lines.push(format!("not saved: {e}")),
            None => {}
        }
        lines
    }
}

/// What a [`Simulation`] found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// Every run, in seed order.
    pub runs: Vec<Run>,
    /// The campaign's summary, as `cargo sim fuzz --json` prints it.
    pub summary: Summary,
}

impl Report {
    /// Did every seed finish without a violation?
    pub fn passed(&self) -> bool {
        self.summary.failures.is_empty()
    }

    /// The failing runs, one per failing seed, in seed order.
    pub fn failures(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| r.failure.is_some())
    }

    /// The outcomes of the runs that finished, in seed order.
    pub fn outcomes(&self) -> impl Iterator<Item = &Outcome> {
        self.runs.iter().filter_map(|r| r.result.as_ref().ok())
    }

    /// Every failure's lines ([`Run::failure_lines`]), one failure after
    /// the other.
    pub fn failure_lines(&self) -> Vec<String> {
        self.failures().flat_map(Run::failure_lines).collect()
    }

    /// Panics unless every seed passed, listing every failure with the
    /// lines that replay it.
    #[track_caller]
    pub fn assert_passes(&self) {
        if self.passed() {
            return;
        }
        panic!(
            "{}: {} of {} seeds failed:\n{}",
            self.scenario,
            self.summary.failures.len(),
            self.runs.len(),
            self.failure_lines().join("\n")
        );
    }
}
