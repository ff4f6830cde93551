//! Runs one seed in isolation: a fresh thread with a fresh madsim runtime,
//! inside `catch_unwind`, under a wall-clock watchdog.
//!
//! A fresh thread per seed is what makes replay faithful: madsim's runtime,
//! std's `RandomState` and thread-local RNGs keep state between runtimes on
//! one thread.

use crate::check;
use crate::engine::Engine;
use crate::faults::{self, FaultPlan};
use crate::history::trace_hash;
use crate::outcome::{leftover_permits, task_counts, Outcome};
use crate::scenario::Scenario;
use crate::world::{self, WorldResult, WorldSpec};
use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// How a seed can fail to produce an outcome at all. Each is a failure of
/// its own kind (`RunError::kind`): campaigns record it and go on, corpus
/// entries can expect it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The world panicked: an engine or harness assertion, or madsim's own
    /// checks. Holds the panic message.
    Panic(String),
    /// No result within the wall-clock watchdog (`run_world`'s `watchdog`):
    /// a livelock, or a seed far slower than it should be. The seed's
    /// thread cannot be killed and is left behind, detached.
    Hang { watchdog_ms: u64 },
    /// The history grew past its cap (`RunSpec::max_records`): the
    /// recorder stopped the seed. Holds what was exceeded.
    Limit(String),
}

impl RunError {
    /// The failure kind's stable name, as fuzz summaries and corpus entries use it.
    pub fn kind(&self) -> &'static str {
        match self {
            RunError::Panic(_) => "panic",
            RunError::Hang { .. } => "hang",
            RunError::Limit(_) => "resource-limit",
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Panic(msg) => write!(f, "panic: {msg}"),
            RunError::Hang { watchdog_ms } => {
                write!(f, "hang: no result within the {watchdog_ms} ms wall-clock watchdog")
            }
            RunError::Limit(what) => write!(f, "resource limit: {what}"),
        }
    }
}

/// Where a run's fault plan comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanSource {
    /// Drawn from the seed (swarm testing): the default.
    Swarm,
    /// No faults at all.
    None,
    /// An explicit list (a corpus entry, a shrink).
    Explicit(FaultPlan),
}

/// How a seed is run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub scenario: Arc<Scenario>,
    /// How the scenario was named on the command line (for the replay command).
    pub scenario_arg: String,
    pub seed: u64,
    pub plan: PlanSource,
    /// The engine's defect switches turned on for this run, sorted (none:
    /// the correct engine).
    pub defects: Vec<String>,
    /// A deliberate harness failure (tests of the runner and campaigns only).
    pub sabotage: Option<world::Sabotage>,
    /// The history cap (a resource limit): past it the seed is a failure.
    pub max_records: usize,
    /// A `RUST_LOG`-style filter: print the engine's tracing logs (with
    /// simulated timestamps) to stderr while the seed runs.
    pub log_filter: Option<String>,
    /// How to replay an explicit plan (e.g. `cargo sim replay FILE`), if it
    /// cannot be given on a command line.
    pub replay_override: Option<String>,
    /// Record the history (default). Off only for `bench`'s phase timing:
    /// such a run cannot be judged.
    pub record: bool,
}

impl RunSpec {
    pub fn new(scenario: Arc<Scenario>, scenario_arg: impl Into<String>, seed: u64) -> Self {
        RunSpec {
            scenario,
            scenario_arg: scenario_arg.into(),
            seed,
            plan: PlanSource::Swarm,
            defects: Vec::new(),
            log_filter: None,
            sabotage: None,
            max_records: crate::history::MAX_RECORDS,
            replay_override: None,
            record: true,
        }
    }

    pub fn with_sabotage(mut self, sabotage: Option<world::Sabotage>) -> Self {
        self.sabotage = sabotage;
        self
    }

    /// Turns these defect switches of the scenario's engine on (names as
    /// `cargo sim list` gives them; checked when the run starts).
    pub fn with_defects<S: ToString>(mut self, defects: impl IntoIterator<Item = S>) -> Self {
        let mut names: Vec<String> = defects.into_iter().map(|d| d.to_string()).collect();
        names.sort();
        names.dedup();
        self.defects = names;
        self
    }

    pub fn with_plan(mut self, plan: PlanSource) -> Self {
        self.plan = plan;
        self
    }

    /// The fault plan this run plays.
    pub fn fault_plan(&self) -> FaultPlan {
        match &self.plan {
            PlanSource::Swarm => faults::draw(self.seed, &self.scenario),
            PlanSource::None => FaultPlan::none(),
            PlanSource::Explicit(plan) => plan.clone(),
        }
    }

    pub fn replay_command(&self) -> String {
        if let Some(cmd) = &self.replay_override {
            return cmd.clone();
        }
        let faults = match self.plan {
            PlanSource::Swarm => "",
            PlanSource::None => " --faults none",
            // No flag carries a list: such runs replay from a corpus entry.
            PlanSource::Explicit(_) => {
                " (plus this run's explicit fault plan: save it as a corpus entry and use cargo sim replay FILE)"
            }
        };
        let defects: String = self.defects.iter().map(|d| format!(" --defect {d}")).collect();
        format!("cargo sim run --scenario {} --seed {}{defects}{faults}", self.scenario_arg, self.seed)
    }

    /// The engine this run drives: the scenario's, with the run's switches.
    ///
    /// # Panics
    /// On a switch the engine does not have (the CLI and corpus check names
    /// before a run starts).
    pub fn engine(&self) -> Arc<dyn Engine> {
        let engine = self.scenario.engine.get();
        if self.defects.is_empty() {
            return engine.clone();
        }
        engine.with_switches(&self.defects).unwrap_or_else(|e| panic!("{e}"))
    }

    /// What this seed draws, drawn once: the world plays it and the
    /// judgement reads it back from the world's result.
    fn world_spec(&self) -> WorldSpec {
        let s = &self.scenario;
        WorldSpec {
            scenario: s.clone(),
            plan: self.fault_plan(),
            workload: Arc::new(world::Drawn::draw(self.seed, &s.workload, s.phases.fault_phase_ms)),
            sabotage: self.sabotage,
            max_records: self.max_records,
            record: self.record,
        }
    }
}

/// The wall-clock time a seed may take before it counts as a hang.
pub const DEFAULT_WATCHDOG: Duration = Duration::from_secs(60);

/// Runs the world on a fresh thread; returns the raw world result.
pub fn run_world(spec: &RunSpec, watchdog: Duration) -> Result<WorldResult, RunError> {
    run_watched(spec, watchdog, |_, result| result)
}

/// Runs the world on a fresh thread, then `after` on its result on the
/// same thread, both under one watchdog: a seed's whole cost (the world and
/// its judgement) is bounded, and a seed past it is a hang.
fn run_watched<T: Send + 'static>(
    spec: &RunSpec,
    watchdog: Duration,
    after: impl FnOnce(&RunSpec, WorldResult) -> T + Send + 'static,
) -> Result<T, RunError> {
    let (tx, rx) = mpsc::channel();
    let world_spec = spec.world_spec();
    let engine = spec.engine();
    let seed = spec.seed;
    let log_filter = spec.log_filter.clone();
    let owned_spec = spec.clone();
    let thread = std::thread::Builder::new()
        .name(format!("seed-{seed}"))
        .stack_size(16 << 20)
        .spawn(move || {
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let rt = madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
                let world = match log_filter {
                    Some(filter) => {
                        let _guard = crate::logs::install(&filter);
                        rt.block_on(engine.run(world_spec, seed))
                    }
                    None => rt.block_on(engine.run(world_spec, seed)),
                };
                // The runtime is dropped first: its nodes and their tasks
                // are freed before the (long) judgement.
                drop(rt);
                // A history the harness itself recorded wrong makes every
                // verdict drawn from it meaningless: the run fails here.
                crate::self_check::assert_history(&world.history);
                after(&owned_spec, world)
            }));
            let _ = tx.send(result.map_err(|payload| match payload.downcast_ref::<crate::history::LimitExceeded>() {
                Some(limit) => RunError::Limit(format!("the history passed {} records", limit.records)),
                None => RunError::Panic(panic_message(payload.as_ref())),
            }));
        })
        .expect("spawn a seed thread");
    match rx.recv_timeout(watchdog) {
        Ok(result) => {
            let _ = thread.join();
            result
        }
        // The thread cannot be killed; it is left behind, detached.
        Err(_) => Err(RunError::Hang { watchdog_ms: watchdog.as_millis() as u64 }),
    }
}

/// Runs one seed and judges it.
pub fn run_seed(spec: &RunSpec, watchdog: Duration) -> Result<Outcome, RunError> {
    run_watched(spec, watchdog, |spec, result| {
        let outcome = judge(spec, &result);
        crate::history::recycle(result.history);
        outcome
    })
}

/// Checks a world result against every invariant and builds the outcome.
pub fn judge(spec: &RunSpec, result: &WorldResult) -> Outcome {
    let report = check::check(&spec.scenario.judge_spec(), &result.history);
    let plan = result.plan.clone();
    Outcome {
        scenario: spec.scenario.name.clone(),
        seed: spec.seed,
        defects: spec.defects.clone(),
        trace_hash: format!("{:016x}", trace_hash(&result.history)),
        events: result.history.len(),
        sim_seconds: result.end_ms as f64 / 1000.0,
        violations: report.violations,
        tasks: task_counts(result),
        leftover_leases: result.tasks.values().filter(|(_, s)| *s == leasesim_vocab::task::TaskState::Leased).count()
            as u64,
        leftover_permits: leftover_permits(&result.history),
        checks: report.checks,
        excused: report.excused,
        not_applicable: report.not_applicable.into_iter().collect(),
        coverage_not_applicable: report.coverage_not_applicable.into_iter().collect(),
        coverage: report.coverage.into_iter().collect(),
        fault_counts: crate::outcome::fault_counts(&result.history),
        fault_plan: plan.events,
        replay: spec.replay_command(),
        aims: report.aims,
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// madsim's own determinism check: runs the seed twice on fresh threads and
/// compares every random draw and its simulated time. It cannot see a
/// divergence in data alone, so the two trace hashes are compared as well.
/// Panics (with madsim's report) on divergence; returns the trace hash.
pub fn check_determinism(spec: &RunSpec) -> u64 {
    let seed = spec.seed;
    use std::sync::Mutex;
    // check_determinism takes a plain fn pointer: the scenario travels
    // through a static, and the lock serializes concurrent callers.
    static CURRENT: Mutex<Option<(Arc<dyn Engine>, WorldSpec)>> = Mutex::new(None);
    static HASHES: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    *CURRENT.lock().expect("lock") = Some((spec.engine(), spec.world_spec()));
    HASHES.lock().expect("lock").clear();
    madsim::runtime::Runtime::check_determinism(seed, madsim::Config::default(), || async {
        let (engine, world_spec) = CURRENT.lock().expect("lock").clone().expect("world spec set");
        let seed = madsim::runtime::Handle::current().seed();
        let result = engine.run(world_spec, seed).await;
        HASHES.lock().expect("lock").push(crate::history::trace_hash(&result.history));
    });
    let hashes = std::mem::take(&mut *HASHES.lock().expect("lock"));
    assert_eq!(hashes.len(), 2, "check_determinism runs the world twice");
    assert_eq!(hashes[0], hashes[1], "seed {seed}: same draws but different event histories");
    hashes[0]
}

/// Where two runs of one seed first differ: the record index and each run's
/// record there (`None` where that run's history had already ended).
pub type Divergence = (usize, Option<crate::history::Record>, Option<crate::history::Record>);

/// Runs the seed twice, each on a fresh thread, and returns the first record
/// at which the two histories differ.
pub fn first_divergence(spec: &RunSpec, watchdog: Duration) -> Result<Option<Divergence>, RunError> {
    let a = run_world(spec, watchdog)?.history;
    let b = run_world(spec, watchdog)?.history;
    let n = a.len().max(b.len());
    Ok((0..n).find(|&i| a.get(i) != b.get(i)).map(|i| (i, a.get(i).cloned(), b.get(i).cloned())))
}
