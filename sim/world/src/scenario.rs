//! Scenarios: worlds described as TOML files (see `scenarios/`).
//!
//! A scenario fixes the topology, the engine's timing constants, the workload,
//! the phases of a run and the liveness bounds the checkers hold it to. Every
//! table refuses unknown fields, and every error names the file and field.

use crate::engine::{self, Engine};
use crate::faults::FaultKind;
pub use crate::ranges::Range;
pub use leasesim_vocab::promise::{Bounds, Phases};
use leasesim_vocab::task::TaskKind;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub topology: Topology,
    /// The engine under test and its configuration (`[engine]`, its `name`
    /// naming the adapter; without one, the built-in engine).
    #[serde(default = "EngineSection::default_engine")]
    pub engine: EngineSection,
    pub workload: Workload,
    pub phases: Phases,
    pub bounds: Bounds,
    #[serde(default)]
    pub faults: FaultLimits,
    #[serde(default, skip_serializing_if = "CoverageSpec::is_empty")]
    pub coverage: CoverageSpec,
}

impl Scenario {
    /// What the checkers hold a run of this scenario to: its engine's
    /// declared promises and capabilities, its phases and bounds.
    pub fn judge_spec(&self) -> crate::check::Spec {
        let engine = self.engine.get();
        crate::check::Spec {
            promises: engine.promises(),
            caps: engine.capabilities(),
            phases: self.phases.clone(),
            bounds: self.bounds.clone(),
        }
    }
}

/// A scenario's `[engine]` as written: the adapter's name and its own
/// fields, not yet configured. Parsing a scenario needs no engine registry;
/// [`configure`] turns this into an engine with the [`engine::Engines`] given.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    pub name: String,
    pub table: toml::Table,
}

/// A scenario's `[engine]`: as written until it is configured ([`configure`]),
/// then the configured engine. Written back as its adapter's whole
/// configuration once configured (every field, so an inline world does not
/// drift when a default changes), with `name` unless it is the built-in.
#[derive(Clone)]
pub struct EngineSection(Section);

#[derive(Clone)]
enum Section {
    Described(Described),
    Configured(Arc<dyn Engine>),
}

impl EngineSection {
    pub fn new(engine: Arc<dyn Engine>) -> Self {
        EngineSection(Section::Configured(engine))
    }

    /// The configured engine.
    ///
    /// # Panics
    /// If the section was parsed but never configured: every way a scenario
    /// comes in (`resolve`, `load`, `parse_with`, a corpus entry) configures
    /// it before anything runs or judges it.
    pub fn get(&self) -> &Arc<dyn Engine> {
        match &self.0 {
            Section::Configured(engine) => engine,
            Section::Described(d) => {
                panic!("engine '{}' used before it was configured (scenario::configure with the Engines)", d.name)
            }
        }
    }

    pub fn name(&self) -> &str {
        match &self.0 {
            Section::Configured(engine) => engine.name(),
            Section::Described(d) => &d.name,
        }
    }

    pub fn is_configured(&self) -> bool {
        matches!(self.0, Section::Configured(_))
    }

    /// The section as a table would write it (`name` and the fields).
    pub fn described(&self) -> Described {
        match &self.0 {
            Section::Configured(engine) => Described { name: engine.name().to_string(), table: engine.config() },
            Section::Described(d) => d.clone(),
        }
    }

    /// The engine of a scenario without `[engine]`: the built-in one, with
    /// its defaults.
    pub fn default_engine() -> Self {
        EngineSection(Section::Described(Described { name: engine::DEFAULT_ENGINE.into(), table: toml::Table::new() }))
    }

    /// The engine a table names (`name`, else the built-in), as written.
    pub fn from_table(mut table: toml::Table) -> Result<Self, String> {
        let name = match table.remove("name") {
            None => engine::DEFAULT_ENGINE.to_string(),
            Some(toml::Value::String(name)) => name,
            Some(other) => return Err(format!("name: expected an engine name, got {other}")),
        };
        Ok(EngineSection(Section::Described(Described { name, table })))
    }

    /// Configures the engine as written with `engines` (a configured one
    /// stays). The error is one line naming the field within `[engine]`.
    pub fn configure(&mut self, engines: &engine::Engines) -> Result<(), String> {
        if let Section::Described(d) = &self.0 {
            self.0 = Section::Configured(engines.configure(d)?);
        }
        Ok(())
    }
}

impl std::fmt::Debug for EngineSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.described();
        write!(f, "EngineSection({} {:?})", d.name, d.table)
    }
}

impl PartialEq for EngineSection {
    fn eq(&self, other: &Self) -> bool {
        let on = |e: &EngineSection| match &e.0 {
            Section::Configured(engine) => engine.switches_on(),
            Section::Described(_) => Vec::new(),
        };
        self.described() == other.described() && on(self) == on(other)
    }
}

impl Serialize for EngineSection {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let described = self.described();
        let mut table = toml::Table::new();
        if described.name != engine::DEFAULT_ENGINE {
            table.insert("name".into(), toml::Value::String(described.name));
        }
        table.extend(described.table);
        table.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EngineSection {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // `engine = "graphile-worker"` names an engine with its defaults;
        // `[engine]` is a table with an optional `name`.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Table(toml::Table),
        }
        let table = match Raw::deserialize(deserializer)? {
            Raw::Name(name) => toml::Table::from_iter([("name".to_string(), toml::Value::String(name))]),
            Raw::Table(table) => table,
        };
        EngineSection::from_table(table).map_err(serde::de::Error::custom)
    }
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
    /// Fault kinds a plan may draw (default: every kind but the ones a
    /// scenario must name, `FaultKind::default_kinds`).
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
    /// Longest time the store process stays down after a crash.
    pub max_store_downtime_ms: u64,
    /// Longest extra delay of a late reply (stale polls, message delay).
    pub max_delay_ms: u64,
    pub max_clock_offset_ms: u64,
}

impl Default for FaultLimits {
    fn default() -> Self {
        FaultLimits {
            kinds: FaultKind::default_kinds(),
            max_events_per_kind: 3,
            max_window_ms: 60_000,
            max_pause_ms: 120_000,
            max_partition_ms: 60_000,
            max_downtime_ms: 60_000,
            max_stall_ms: 20_000,
            max_store_downtime_ms: 20_000,
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
    /// When set, each query's lag is drawn uniformly from
    /// `query_lag_timeout_ms` to this (0: every query waits
    /// `query_lag_timeout_ms`). A lag longer than the engine's RPC deadline
    /// is a query the client must wait out past one RPC deadline.
    pub query_lag_max_ms: u64,
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
    pub long_work_kinds: Vec<TaskKind>,
    pub long_work_min_ms: u64,
    pub long_work_max_ms: u64,
    /// Work enqueued after the heal, once the world has settled: index builds
    /// (each queried `query_after_ms` later) and jobs, spread over
    /// `after_heal_window_ms` starting `after_heal_delay_ms` after the heal.
    pub after_heal_delay_ms: u64,
    pub after_heal_window_ms: u64,
    pub after_heal_index_builds: u32,
    pub after_heal_jobs: u32,
    /// Named queues jobs are spread over (0: none): each job lands in one,
    /// drawn uniformly, with chance `queue_rate`; a queue runs one job at a
    /// time (engines with named queues only).
    pub queues: u32,
    pub queue_rate: f64,
    /// Long-lived application clients the calls are spread over, each call's
    /// client drawn uniformly (0: every call from a fresh client of its own).
    /// A long-lived client makes many calls, some with equal content, and
    /// its idempotency keys must stay distinct across all of them.
    pub clients: u32,
    /// Chance that a job is enqueued with a not-before time in the future:
    /// up to `scheduled_max_ms` after its enqueue, drawn uniformly. No
    /// attempt may be granted before it, and it is due from then on.
    pub scheduled_rate: f64,
    pub scheduled_max_ms: u64,
}

/// One scripted enqueue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scripted {
    pub at_ms: u64,
    pub kind: TaskKind,
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
            query_lag_max_ms: 0,
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
            queues: 0,
            queue_rate: 0.5,
            clients: 0,
            scheduled_rate: 0.0,
            scheduled_max_ms: 0,
        }
    }
}

/// Where a scenario came from, for error messages.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub scenario: Scenario,
    pub path: PathBuf,
}

/// The directory holding the built-in scenarios.
pub fn builtin_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
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

/// Resolves NAME (a built-in scenario) or PATH (a TOML file) and loads it,
/// its engine configured from `engines`.
pub fn resolve(name_or_path: &str, engines: &engine::Engines) -> Result<Loaded, String> {
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
    load(&path, engines)
}

pub fn load(path: &Path, engines: &engine::Engines) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let scenario = parse_with(&text, engines).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Loaded { scenario, path: path.to_path_buf() })
}

/// Parses a scenario and checks every field and relation that does not
/// depend on its engine; `[engine]` stays as written (no registry needed).
/// The error is one line naming the field.
pub fn parse(text: &str) -> Result<Scenario, String> {
    let scenario: Scenario = from_toml(text)?;
    validate_world(&scenario)?;
    Ok(scenario)
}

/// Parses a scenario, configures its engine from `engines` and validates it
/// whole. An engine's error names its field (`engine.lease_ttl.job_ms: ...`)
/// and the line it is on.
pub fn parse_with(text: &str, engines: &engine::Engines) -> Result<Scenario, String> {
    let mut scenario = parse(text)?;
    configure(&mut scenario, engines).map_err(|e| with_line(text, e))?;
    Ok(scenario)
}

/// Configures a parsed scenario's engine from `engines`, then checks the
/// relations between that engine and the world.
pub fn configure(scenario: &mut Scenario, engines: &engine::Engines) -> Result<(), String> {
    scenario.engine.configure(engines).map_err(|e| format!("engine.{e}"))?;
    validate_engine(scenario)
}

/// `error` (`engine.field: ...`) with the line its field is on in `text`.
fn with_line(text: &str, error: String) -> String {
    let Some((path, _)) = error.split_once(": ") else { return error };
    let line = (1..=text.lines().count()).find(|&l| {
        field_at_line(text, l)
            .is_some_and(|f| f == path || path.starts_with(&format!("{f}.")) || f.starts_with(&format!("{path}.")))
    });
    match line {
        Some(l) if !error.ends_with(')') => format!("{error} (line {l})"),
        _ => error,
    }
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
        // An engine's own configuration error names its field within
        // `[engine]` ("lease_ttl.job_ms: ..."): one path, "engine.lease_ttl.job_ms".
        if let Some((field, rest)) = message.split_once(": ").filter(|(f, _)| is_field_path(f)) {
            if path == "engine" || path.ends_with(".engine") {
                return format!("{path}.{field}: {rest}{at}");
            }
        }
        if path.is_empty() || path == "." {
            // A value TOML itself cannot hold (an integer past i64) fails
            // before any field is known: name the field from its line.
            match line.and_then(|l| field_at_line(text, l)) {
                Some(field) => format!("{field}: {message}{at}"),
                None => format!("{message}{at}"),
            }
        } else {
            format!("{path}: {message}{at}")
        }
    })
}

/// A scenario's name goes into the names of the corpus entries it saves and
/// into every replay line: a word of letters, digits, `-`, `_` and `.`.
pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_DESCRIPTION_CHARS: usize = 4096;

fn check_name(name: &str) -> Result<(), String> {
    let word = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if name.is_empty() || name.len() > MAX_NAME_CHARS || !word || name.starts_with('.') {
        let shown: String = name.chars().take(24).collect();
        return Err(format!(
            "name: '{shown}{}' is not a name (1 to {MAX_NAME_CHARS} letters, digits, '-', '_' or '.', not starting with '.')",
            if name.chars().count() > 24 { "…" } else { "" }
        ));
    }
    Ok(())
}

/// The dotted path of the `key = value` on line `line` (1-based) of a TOML
/// text: its table headers above it, then the key.
fn field_at_line(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (key, _) = lines.get(line.checked_sub(1)?)?.split_once('=')?;
    let key = key.trim().trim_matches('"');
    if !is_field_path(key) {
        return None;
    }
    let above = &lines[..line - 1];
    let Some(header) = above.iter().rev().map(|l| l.trim()).find(|l| l.starts_with('[')) else {
        return Some(key.to_string());
    };
    let table = header.trim_start_matches('[').trim_end_matches(']').trim();
    // `[[plan]]`: the n-th table of the array, counted from 0.
    if header.starts_with("[[") {
        let n = above.iter().filter(|l| l.trim() == header).count();
        return Some(format!("{table}[{}].{key}", n.saturating_sub(1)));
    }
    Some(format!("{table}.{key}"))
}

/// Does `s` look like a field path (`lease_ttl.job_ms`, `queues[2]`)?
fn is_field_path(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '-'))
}

/// The caps of a scenario's own fields (the engine's are in
/// [`EngineConfig::RANGES`]); durations share the engine's caps.
pub mod ranges {
    use crate::ranges::{Range, DAY_MS, MAX_DURATION_MS};

    /// More worker processes than this is not a world one seed can run.
    pub const WORKERS: Range = Range::count(1, 64);
    /// Tasks or groups of one kind a workload enqueues. A seed with ten
    /// thousand tasks already takes seconds to judge; more would not fit a
    /// seed's watchdog.
    pub const TASKS: Range = Range::count(0, 10_000);
    /// Tasks and groups of every kind together.
    pub const ALL_TASKS: u64 = 10_000;
    /// Stages of one pipeline, workflow tasks of one run.
    pub const PER_GROUP: Range = Range::count(0, 1_000);
    /// Any duration of the world, a phase, a bound or a fault limit.
    pub const SPAN_MS: Range = Range::ms(0, MAX_DURATION_MS);
    /// A liveness bound under a second demands the impossible of any engine
    /// that reaches its store over a network and polls: a claim, a
    /// recovery, a materialization or a completion in a few milliseconds.
    pub const BOUND_MS: Range = Range::ms(1_000, MAX_DURATION_MS);
    /// A phase of 0 ms does not happen.
    pub const PHASE_MS: Range = Range::ms(1, MAX_DURATION_MS);
    /// A query waits for its index at most this long (0: answer at once).
    pub const LAG_MS: Range = Range::ms(0, DAY_MS);
    /// Fault events per enabled kind (0: a plan draws none).
    pub const EVENTS_PER_KIND: Range = Range::count(0, 100);
    /// Windows, pauses, partitions, downtimes and stalls: a plan never draws
    /// one shorter than `faults::MIN_SPAN_MS`, so a smaller limit would be
    /// silently raised.
    pub const FAULT_SPAN_MS: Range = Range::ms(crate::faults::MIN_SPAN_MS, MAX_DURATION_MS);
    /// Extra delay of a late reply; the same holds for `faults::MIN_DELAY_MS`.
    pub const DELAY_MS: Range = Range::ms(crate::faults::MIN_DELAY_MS, DAY_MS);
    /// A process's clock offset (0: no skew). A day off is no longer skew.
    pub const CLOCK_OFFSET_MS: Range = Range::ms(0, DAY_MS);
    /// Seeds a campaign needs before coverage is judged (0: always judged);
    /// beyond a billion it would never be.
    pub const MIN_SEEDS: Range = Range::count(0, 1_000_000_000);
}

/// Refuses a scenario that cannot describe a real world: every numeric field
/// against its range, then the relations between fields. The error is one
/// line that starts with the field's path (`engine.lease_ttl.job_ms: ...`).
pub fn validate(s: &Scenario) -> Result<(), String> {
    validate_world(s)?;
    validate_engine(s)
}

/// Every field and relation of the world that does not depend on its engine.
pub fn validate_world(s: &Scenario) -> Result<(), String> {
    check_name(&s.name)?;
    if s.description.len() > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "description: {} characters; at most {MAX_DESCRIPTION_CHARS} (a line or a paragraph, not a document)",
            s.description.len()
        ));
    }
    for (path, value, range) in ranged_fields(s) {
        range.check(&path, value)?;
    }
    let w = &s.workload;
    let rates = [
        ("authz_conflict_rate", w.authz_conflict_rate),
        ("job_fail_rate", w.job_fail_rate),
        ("fatal_rate", w.fatal_rate),
        ("long_work_rate", w.long_work_rate),
        ("queue_rate", w.queue_rate),
        ("scheduled_rate", w.scheduled_rate),
    ];
    for (field, rate) in rates {
        if !(0.0..=1.0).contains(&rate) {
            return Err(format!("workload.{field}: must be from 0 to 1, got {rate}"));
        }
    }
    // Relations: each names the field that would have to change.
    if let Some(quiet_ms) = s.phases.quiet_end_ms.filter(|&q| q > s.phases.heal_phase_ms) {
        return Err(format!(
            "phases.quiet_end_ms: must not exceed phases.heal_phase_ms ({} ms), got {quiet_ms} ms",
            s.phases.heal_phase_ms
        ));
    }
    if w.work_min_ms > w.work_max_ms {
        return Err(format!("workload.work_min_ms: must not exceed workload.work_max_ms ({} ms)", w.work_max_ms));
    }
    if w.activity_work_min_ms > w.activity_work_max_ms {
        return Err(format!(
            "workload.activity_work_min_ms: must not exceed workload.activity_work_max_ms ({} ms)",
            w.activity_work_max_ms
        ));
    }
    if w.pipelines > 0 && w.stages_per_pipeline == 0 {
        return Err("workload.stages_per_pipeline: must be at least 1 when pipelines are enqueued".into());
    }
    if w.workflow_runs > 0 && w.workflow_tasks_per_run == 0 {
        return Err(
            "workload.workflow_tasks_per_run: must be at least 1 when workflow runs are enqueued (a run starts with a workflow task)"
                .into(),
        );
    }
    // A body that takes no time at all describes no work.
    let activities = w.workflow_runs > 0 || w.script.iter().any(|e| e.kind == TaskKind::Activity);
    let ordinary = w.index_builds + w.authz_materializations + w.jobs + w.pipelines + w.workflow_runs > 0
        || w.after_heal_index_builds + w.after_heal_jobs > 0
        || w.script.iter().any(|e| e.kind != TaskKind::Activity);
    if ordinary && w.work_max_ms == 0 {
        return Err("workload.work_max_ms: must be at least 1 ms when tasks are enqueued".into());
    }
    if activities && w.activity_work_max_ms == 0 {
        return Err("workload.activity_work_max_ms: must be at least 1 ms when activities are enqueued".into());
    }
    if w.long_work_rate > 0.0 && (w.long_work_min_ms == 0 || w.long_work_min_ms > w.long_work_max_ms) {
        return Err(format!(
            "workload.long_work_min_ms: must be from 1 ms to workload.long_work_max_ms ({} ms) when workload.long_work_rate is set, got {} ms",
            w.long_work_max_ms, w.long_work_min_ms
        ));
    }
    if w.query_lag_max_ms > 0 && w.query_lag_max_ms < w.query_lag_timeout_ms {
        return Err(format!(
            "workload.query_lag_max_ms: must be 0 or at least workload.query_lag_timeout_ms ({} ms), got {} ms",
            w.query_lag_timeout_ms, w.query_lag_max_ms
        ));
    }
    if w.scheduled_rate > 0.0 && w.scheduled_max_ms == 0 {
        return Err("workload.scheduled_max_ms: must be at least 1 ms when workload.scheduled_rate is set".into());
    }
    let late = w.after_heal_delay_ms + w.after_heal_window_ms;
    let lag_ms = w.query_lag_timeout_ms.max(w.query_lag_max_ms);
    if w.after_heal_index_builds + w.after_heal_jobs > 0
        && late + w.query_after_ms + lag_ms + w.scheduled_max_ms > s.phases.heal_phase_ms
    {
        return Err(
            "workload.after_heal_window_ms: work enqueued after the heal (and its queries) must end within phases.heal_phase_ms".into(),
        );
    }
    if w.enqueue_window_ms > s.phases.fault_phase_ms {
        return Err(format!(
            "workload.enqueue_window_ms: must not exceed phases.fault_phase_ms ({} ms)",
            s.phases.fault_phase_ms
        ));
    }
    let end_ms = s.phases.duration_ms();
    if let Some(i) = w.script.iter().position(|e| e.at_ms >= end_ms) {
        return Err(format!(
            "workload.script[{i}].at_ms: must be before the end of the run ({end_ms} ms: phases.fault_phase_ms + phases.heal_phase_ms), got {} ms",
            w.script[i].at_ms
        ));
    }
    for (i, point) in s.coverage.require.iter().enumerate() {
        if !crate::check::coverage::known(point) {
            return Err(format!("coverage.require[{i}]: unknown coverage point '{point}' (see cargo sim list)"));
        }
    }
    let total = w.index_builds + w.authz_materializations + w.jobs + w.pipelines + w.workflow_runs;
    if total == 0 && w.script.is_empty() {
        return Err(
            "workload: enqueues nothing (workload.index_builds, workload.authz_materializations, workload.jobs, \
             workload.pipelines, workload.workflow_runs and workload.script are all empty)"
                .into(),
        );
    }
    let all = u64::from(total) + u64::from(w.after_heal_index_builds) + u64::from(w.after_heal_jobs);
    if all > ranges::ALL_TASKS {
        return Err(format!("workload: {all} tasks and groups in all; at most {} fit one seed", ranges::ALL_TASKS));
    }
    Ok(())
}

/// The relations between a configured engine and the world (index builds
/// need an index pass, ...), and what the engine cannot do at all.
pub fn validate_engine(s: &Scenario) -> Result<(), String> {
    let w = &s.workload;
    if w.queues > 0 && !s.engine.get().capabilities().named_queues {
        return Err(format!("workload.queues: engine '{}' has no named queues", s.engine.get().name()));
    }
    if s.faults.kinds.contains(&FaultKind::GracefulStop) && !s.engine.get().capabilities().graceful_stop {
        return Err(format!("faults.kinds: engine '{}' cannot stop gracefully (graceful-stop)", s.engine.get().name()));
    }
    s.engine.get().validate(s)
}

/// Every numeric field of a scenario outside `[engine]`, with its path and
/// allowed range ([`ranges`]).
fn ranged_fields(s: &Scenario) -> Vec<(String, u64, Range)> {
    use ranges::*;
    let (w, p, b, f) = (&s.workload, &s.phases, &s.bounds, &s.faults);
    let mut fields: Vec<(String, u64, Range)> = [
        ("topology.workers", s.topology.workers as u64, WORKERS),
        ("workload.enqueue_window_ms", w.enqueue_window_ms, SPAN_MS),
        ("workload.index_builds", w.index_builds as u64, TASKS),
        ("workload.authz_materializations", w.authz_materializations as u64, TASKS),
        ("workload.jobs", w.jobs as u64, TASKS),
        ("workload.pipelines", w.pipelines as u64, TASKS),
        ("workload.stages_per_pipeline", w.stages_per_pipeline as u64, PER_GROUP),
        ("workload.workflow_runs", w.workflow_runs as u64, TASKS),
        ("workload.workflow_tasks_per_run", w.workflow_tasks_per_run as u64, PER_GROUP),
        ("workload.workflow_task_gap_ms", w.workflow_task_gap_ms, SPAN_MS),
        ("workload.work_min_ms", w.work_min_ms, SPAN_MS),
        ("workload.work_max_ms", w.work_max_ms, SPAN_MS),
        ("workload.activity_work_min_ms", w.activity_work_min_ms, SPAN_MS),
        ("workload.activity_work_max_ms", w.activity_work_max_ms, SPAN_MS),
        ("workload.query_after_ms", w.query_after_ms, SPAN_MS),
        ("workload.query_lag_timeout_ms", w.query_lag_timeout_ms, LAG_MS),
        ("workload.query_lag_max_ms", w.query_lag_max_ms, LAG_MS),
        ("workload.long_work_min_ms", w.long_work_min_ms, SPAN_MS),
        ("workload.long_work_max_ms", w.long_work_max_ms, SPAN_MS),
        ("workload.after_heal_delay_ms", w.after_heal_delay_ms, SPAN_MS),
        ("workload.after_heal_window_ms", w.after_heal_window_ms, SPAN_MS),
        ("workload.after_heal_index_builds", w.after_heal_index_builds as u64, TASKS),
        ("workload.after_heal_jobs", w.after_heal_jobs as u64, TASKS),
        ("workload.queues", w.queues as u64, PER_GROUP),
        ("workload.clients", w.clients as u64, PER_GROUP),
        ("workload.scheduled_max_ms", w.scheduled_max_ms, SPAN_MS),
        ("phases.fault_phase_ms", p.fault_phase_ms, PHASE_MS),
        ("phases.heal_phase_ms", p.heal_phase_ms, PHASE_MS),
        ("bounds.claim_bound_ms", b.claim_bound_ms, BOUND_MS),
        ("bounds.recovery_bound_ms", b.recovery_bound_ms, BOUND_MS),
        // 0 slack is strict (release exactly by the deadline), not impossible.
        ("bounds.permit_release_slack_ms", b.permit_release_slack_ms, SPAN_MS),
        ("bounds.materialize_bound_ms", b.materialize_bound_ms, BOUND_MS),
        ("bounds.completion_bound_ms", b.completion_bound_ms, BOUND_MS),
        ("faults.max_events_per_kind", f.max_events_per_kind as u64, EVENTS_PER_KIND),
        ("faults.max_window_ms", f.max_window_ms, FAULT_SPAN_MS),
        ("faults.max_pause_ms", f.max_pause_ms, FAULT_SPAN_MS),
        ("faults.max_partition_ms", f.max_partition_ms, FAULT_SPAN_MS),
        ("faults.max_downtime_ms", f.max_downtime_ms, FAULT_SPAN_MS),
        ("faults.max_stall_ms", f.max_stall_ms, FAULT_SPAN_MS),
        ("faults.max_store_downtime_ms", f.max_store_downtime_ms, FAULT_SPAN_MS),
        ("faults.max_delay_ms", f.max_delay_ms, DELAY_MS),
        ("faults.max_clock_offset_ms", f.max_clock_offset_ms, CLOCK_OFFSET_MS),
        ("coverage.min_seeds", s.coverage.min_seeds, MIN_SEEDS),
    ]
    .into_iter()
    .map(|(path, value, range)| (path.to_string(), value, range))
    .collect();
    if let Some(ms) = p.quiet_end_ms {
        // A period of at least a second (looked at four times in it); at most
        // the liveness phase (a relation, in `validate`).
        fields.push(("phases.quiet_end_ms".into(), ms, BOUND_MS));
    }
    if let Some(ms) = b.fresh_index_after_heal_ms {
        // 0: every index built after the heal is judged.
        fields.push(("bounds.fresh_index_after_heal_ms".into(), ms, SPAN_MS));
    }
    for (i, e) in w.script.iter().enumerate() {
        fields.push((format!("workload.script[{i}].at_ms"), e.at_ms, SPAN_MS));
    }
    fields
}
