//! Scenarios: worlds described as TOML files (see `scenarios/`).
//!
//! A scenario fixes the topology, the engine's timing constants, the workload,
//! the phases of a run and the liveness bounds the checkers hold it to. Every
//! table refuses unknown fields, and every error names the file and field.

use crate::faults::FaultKind;
use leasesim::config::EngineConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub topology: Topology,
    #[serde(default)]
    pub engine: EngineConfig,
    pub workload: Workload,
    pub phases: Phases,
    pub bounds: Bounds,
    #[serde(default)]
    pub faults: FaultLimits,
    #[serde(default, skip_serializing_if = "CoverageSpec::is_empty")]
    pub coverage: CoverageSpec,
}

/// The coverage points a campaign on this scenario must reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoverageSpec {
    /// Points (see `cargo sim list`) every campaign of `min_seeds` seeds or
    /// more must reach at least once.
    pub require: Vec<String>,
    /// A campaign with fewer seeds of this scenario is too short to judge.
    pub min_seeds: u64,
}

impl Default for CoverageSpec {
    fn default() -> Self {
        CoverageSpec { require: Vec::new(), min_seeds: 200 }
    }
}

impl CoverageSpec {
    pub fn is_empty(&self) -> bool {
        self.require.is_empty()
    }
}

/// What a seed's fault plan may contain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultLimits {
    /// Fault kinds a plan may draw (default: all).
    pub kinds: Vec<FaultKind>,
    /// An enabled kind gets 1..=this many events.
    pub max_events_per_kind: u32,
    /// Longest window of a rate fault (loss, delay, hung writes, conflicts...).
    pub max_window_ms: u64,
    /// Longest pause of a process (and longest run of missed heartbeats).
    pub max_pause_ms: u64,
    pub max_partition_ms: u64,
    /// Longest time a killed process stays down before it restarts.
    pub max_downtime_ms: u64,
    pub max_stall_ms: u64,
    /// Longest extra delay of a late reply (stale polls, message delay).
    pub max_delay_ms: u64,
    pub max_clock_offset_ms: u64,
}

impl Default for FaultLimits {
    fn default() -> Self {
        FaultLimits {
            kinds: FaultKind::ALL.to_vec(),
            max_events_per_kind: 3,
            max_window_ms: 60_000,
            max_pause_ms: 120_000,
            max_partition_ms: 60_000,
            max_downtime_ms: 60_000,
            max_stall_ms: 20_000,
            max_delay_ms: 8_000,
            max_clock_offset_ms: 2_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Worker processes (each one also runs the scheduler duties).
    pub workers: u32,
}

/// What the client asks for. Every count is a number of tasks or groups
/// enqueued, spread uniformly over `enqueue_window_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Workload {
    pub enqueue_window_ms: u64,
    pub index_builds: u32,
    pub authz_materializations: u32,
    /// Chance that one attempt of an authz materialization hits a write conflict.
    pub authz_conflict_rate: f64,
    pub jobs: u32,
    /// Chance that one attempt of a job fails with a conflict.
    pub job_fail_rate: f64,
    pub pipelines: u32,
    pub stages_per_pipeline: u32,
    pub workflow_runs: u32,
    /// Workflow tasks per run; one activity per run runs beside them.
    pub workflow_tasks_per_run: u32,
    /// Gap between consecutive workflow tasks of a run.
    pub workflow_task_gap_ms: u64,
    /// Execution time of ordinary task bodies.
    pub work_min_ms: u64,
    pub work_max_ms: u64,
    /// Execution time of activities (long-leased).
    pub activity_work_min_ms: u64,
    pub activity_work_max_ms: u64,
    /// The client queries each index this long after enqueueing its build.
    pub query_after_ms: u64,
    pub query_lag_timeout_ms: u64,
    /// Scripted enqueues at fixed times, on top of the drawn workload (for
    /// regression scenarios that place every step deterministically).
    pub script: Vec<Scripted>,
    /// Chance that one attempt of a job or authz materialization fails with a
    /// fatal error (no retry).
    pub fatal_rate: f64,
    /// Chance that one attempt of a task of `long_work_kinds` runs long
    /// instead: between `long_work_min_ms` and `long_work_max_ms` (long
    /// enough to outlive a lease that is not renewed).
    pub long_work_rate: f64,
    pub long_work_kinds: Vec<leasesim::task::TaskKind>,
    pub long_work_min_ms: u64,
    pub long_work_max_ms: u64,
    /// Work enqueued after the heal, once the world has settled: index builds
    /// (each queried `query_after_ms` later) and jobs, spread over
    /// `after_heal_window_ms` starting `after_heal_delay_ms` after the heal.
    pub after_heal_delay_ms: u64,
    pub after_heal_window_ms: u64,
    pub after_heal_index_builds: u32,
    pub after_heal_jobs: u32,
}

/// One scripted enqueue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scripted {
    pub at_ms: u64,
    pub kind: leasesim::task::TaskKind,
    /// The workflow run or pipeline the task belongs to.
    #[serde(default)]
    pub group: Option<u64>,
    /// For index builds: the index, queried `query_after_ms` after the enqueue.
    #[serde(default)]
    pub index: Option<u64>,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            enqueue_window_ms: 60_000,
            index_builds: 0,
            authz_materializations: 0,
            authz_conflict_rate: 0.0,
            jobs: 0,
            job_fail_rate: 0.0,
            pipelines: 0,
            stages_per_pipeline: 3,
            workflow_runs: 0,
            workflow_tasks_per_run: 2,
            workflow_task_gap_ms: 5_000,
            work_min_ms: 100,
            work_max_ms: 2_000,
            activity_work_min_ms: 30_000,
            activity_work_max_ms: 120_000,
            query_after_ms: 10_000,
            query_lag_timeout_ms: 5_000,
            script: Vec::new(),
            fatal_rate: 0.0,
            long_work_rate: 0.0,
            long_work_kinds: Vec::new(),
            long_work_min_ms: 0,
            long_work_max_ms: 0,
            after_heal_delay_ms: 0,
            after_heal_window_ms: 0,
            after_heal_index_builds: 0,
            after_heal_jobs: 0,
        }
    }
}

/// A run is a fault phase, then a heal (faults stop, paused processes resume,
/// dead ones restart), then a liveness phase in which the world must converge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phases {
    pub fault_phase_ms: u64,
    pub heal_phase_ms: u64,
}

impl Phases {
    pub fn duration_ms(&self) -> u64 {
        self.fault_phase_ms + self.heal_phase_ms
    }
}

/// Liveness bounds. Each is measured in simulated time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    /// A due task is claimed within this while some live worker has a free permit.
    pub claim_bound_ms: u64,
    /// An expired lease is reclaimed within this after it expires.
    pub recovery_bound_ms: u64,
    /// Extra time allowed, on top of the finalization deadline, between the end of
    /// an attempt's execution and the release of its permit.
    pub permit_release_slack_ms: u64,
    /// After heal, every index build enqueued before heal is materialized within this.
    pub materialize_bound_ms: u64,
    /// After heal, every task is terminal within this.
    pub completion_bound_ms: u64,
    /// An index build enqueued this long after the heal, or later, must answer
    /// "materialized" to its query (issued `query_after_ms` after the enqueue,
    /// waiting `query_lag_timeout_ms`). Unset: not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_index_after_heal_ms: Option<u64>,
}

/// Where a scenario came from, for error messages.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub scenario: Scenario,
    pub path: PathBuf,
}

/// The directory holding the built-in scenarios.
pub fn builtin_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    dir.canonicalize().unwrap_or(dir)
}

/// Names of the built-in scenarios, sorted.
pub fn builtin_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(builtin_dir())
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".toml")).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Resolves NAME (a built-in scenario) or PATH (a TOML file) and loads it.
pub fn resolve(name_or_path: &str) -> Result<Loaded, String> {
    let as_path = Path::new(name_or_path);
    let path = if name_or_path.ends_with(".toml") || name_or_path.contains('/') {
        as_path.to_path_buf()
    } else {
        let path = builtin_dir().join(format!("{name_or_path}.toml"));
        if !path.exists() {
            return Err(format!("unknown scenario '{name_or_path}' (built-in: {})", builtin_names().join(", ")));
        }
        path
    };
    load(&path)
}

pub fn load(path: &Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let scenario = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Loaded { scenario, path: path.to_path_buf() })
}

/// Parses and validates a scenario. The error is one line naming the field.
pub fn parse(text: &str) -> Result<Scenario, String> {
    let scenario: Scenario = from_toml(text)?;
    validate(&scenario)?;
    Ok(scenario)
}

/// Deserializes TOML into `T`; the error is one line: field path, message, line.
pub fn from_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let de = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.message().trim().replace('\n', " ");
        let line = inner.span().map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        let at = line.map(|l| format!(" (line {l})")).unwrap_or_default();
        if path.is_empty() || path == "." {
            format!("{message}{at}")
        } else {
            format!("{path}: {message}{at}")
        }
    })
}

pub fn validate(s: &Scenario) -> Result<(), String> {
    s.engine.validate().map_err(|e| format!("engine.{e}"))?;
    if s.topology.workers == 0 || s.topology.workers > 64 {
        return Err("topology.workers must be between 1 and 64".into());
    }
    let w = &s.workload;
    let rates = [
        ("authz_conflict_rate", w.authz_conflict_rate),
        ("job_fail_rate", w.job_fail_rate),
        ("fatal_rate", w.fatal_rate),
        ("long_work_rate", w.long_work_rate),
    ];
    for (field, rate) in rates {
        if !(0.0..=1.0).contains(&rate) {
            return Err(format!("workload.{field} must be between 0 and 1"));
        }
    }
    if w.work_min_ms > w.work_max_ms {
        return Err("workload.work_min_ms must not exceed workload.work_max_ms".into());
    }
    if w.activity_work_min_ms > w.activity_work_max_ms {
        return Err("workload.activity_work_min_ms must not exceed workload.activity_work_max_ms".into());
    }
    if w.long_work_rate > 0.0 && (w.long_work_min_ms == 0 || w.long_work_min_ms > w.long_work_max_ms) {
        return Err(
            "workload.long_work_min_ms must be between 1 and workload.long_work_max_ms when long_work_rate is set"
                .into(),
        );
    }
    let late = w.after_heal_delay_ms + w.after_heal_window_ms;
    if w.after_heal_index_builds + w.after_heal_jobs > 0
        && late + w.query_after_ms + w.query_lag_timeout_ms > s.phases.heal_phase_ms
    {
        return Err(
            "workload.after_heal_window_ms: work enqueued after the heal (and its queries) must end within phases.heal_phase_ms".into(),
        );
    }
    if w.pipelines > 0 && w.stages_per_pipeline == 0 {
        return Err("workload.stages_per_pipeline must be at least 1".into());
    }
    if s.phases.fault_phase_ms == 0 || s.phases.heal_phase_ms == 0 {
        return Err("phases.fault_phase_ms and phases.heal_phase_ms must be greater than 0".into());
    }
    if w.enqueue_window_ms > s.phases.fault_phase_ms {
        return Err("workload.enqueue_window_ms must not exceed phases.fault_phase_ms".into());
    }
    for (i, point) in s.coverage.require.iter().enumerate() {
        if !crate::check::coverage::known(point) {
            return Err(format!("coverage.require[{i}]: unknown coverage point '{point}' (see cargo sim list)"));
        }
    }
    let builds = w.index_builds + w.after_heal_index_builds > 0
        || w.script.iter().any(|s| s.kind == leasesim::task::TaskKind::IndexBuild);
    if builds && !s.engine.maintenance.contains(&leasesim::config::MaintenanceKind::Index) {
        return Err("engine.maintenance: index builds need an \"index\" finalization pass to materialize".into());
    }
    let total = w.index_builds + w.authz_materializations + w.jobs + w.pipelines + w.workflow_runs;
    if total == 0 && w.script.is_empty() {
        return Err("workload: enqueues nothing".into());
    }
    Ok(())
}
