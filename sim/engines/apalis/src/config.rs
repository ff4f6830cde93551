//! A scenario's `[engine]` for apalis-redis: the fields of apalis's own
//! `Config` a deployment sets, and the deployment around it (the
//! connection's response timeout, the supervisor's restart delay).
//!
//! Every duration carries its unit in its name; unknown fields are refused,
//! and every value is checked against a range, naming its field.

use leasesim_world::ranges::{Range, DAY_MS, MAX_DURATION_MS};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApalisConfig {
    /// The queue's name: every key apalis uses starts with it.
    pub queue: String,
    /// Tasks fetched per poll (`Config::batch_size`).
    pub batch_size: u32,
    /// `Config::heartbeat_interval`: a worker keeps itself alive, renews
    /// its leases and re-enqueues other workers' orphans this often.
    pub heartbeat_interval_ms: u64,
    /// `Config::missed_heartbeats`: a worker silent for this many
    /// intervals is dead, and its in-flight tasks are re-enqueued.
    pub missed_heartbeats: u32,
    /// `Config::lock_tasks`: acquire and renew a lease per fetched task.
    pub lock_tasks: bool,
    /// `Config::emit_events`: publish task events (no subscriber here).
    pub emit_events: bool,
    /// The `redis` crate's response timeout: a command unanswered this long
    /// fails with an I/O error, its effect unknown to the caller.
    pub response_timeout_ms: u64,
    /// What survives a crash of the store process: `always`
    /// (`appendfsync always`: every answered write), `everysec` (the
    /// keyspace as of the last whole second: the writes of the second before
    /// the crash are lost), `none` (no persistence: an empty keyspace). A
    /// restart always empties the script cache (Redis never persists it).
    pub persistence: Persistence,
    /// How the deployment names its workers: `per-process` (the same name
    /// across a process's restarts, as a supervisor restarts it) or
    /// `per-run` (a new name each time, as an orchestrator names each new
    /// pod; a dead name is then never heard again, and only other workers'
    /// orphan re-enqueueing brings its tasks back).
    pub worker_names: WorkerNames,
    /// An operator's dashboard: before every `dashboard_every`-th call of
    /// the application (0: none), the client reads the queue's statistics,
    /// tasks and workers (`Metrics::global`, `Metrics::fetch_by_queue`,
    /// `ListTasks::list_tasks`, `ListWorkers::list_workers`).
    pub dashboard_every: u32,
    /// The application's attempt budget on every job it pushes
    /// (`TaskBuilder::max_attempts`); without one apalis-redis's push gives
    /// a job 25. (apalis-redis 1.0.0's `handle_results.lua` ignores it and
    /// retries to the 25th attempt: docs/findings/apalis.md,
    /// max-attempts-ignored.)
    pub max_attempts: u32,
    /// A worker whose `run` returned (apalis stops a worker on a failed
    /// heartbeat or event write) is started again after this long, under
    /// the same name, as a supervisor restarts it.
    pub restart_delay_ms: u64,
}

impl Default for ApalisConfig {
    /// apalis's own defaults (`Config::default()`). With them
    /// (`emit_events` on) apalis 1.0.0's `renew_leases.lua` reads a fourth
    /// key its Rust side never passes, and every worker dies at its first
    /// heartbeat (docs/findings/apalis.md, renew-leases-missing-key): the
    /// scenarios turn events off, as a user who met that bug would.
    fn default() -> Self {
        ApalisConfig {
            queue: "leasesim".into(),
            batch_size: 10,
            heartbeat_interval_ms: 30_000,
            missed_heartbeats: 10,
            lock_tasks: true,
            emit_events: true,
            response_timeout_ms: crate::conn::RESPONSE_TIMEOUT_MS,
            restart_delay_ms: 1_000,
            persistence: Persistence::Always,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            worker_names: WorkerNames::PerProcess,
            dashboard_every: 0,
        }
    }
}

/// The budget apalis-redis's push gives a job that names none
/// (`push_tasks`: `max_attempts().unwrap_or(25)`).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 25;

/// How a deployment names its workers (`ApalisConfig::worker_names`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerNames {
    PerProcess,
    PerRun,
}

/// Redis's persistence, as the deployment configures it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Persistence {
    Always,
    Everysec,
    None,
}

/// A period of 0 would spin; one longer than a day is no longer a loop.
const PERIOD_MS: Range = Range::ms(1, DAY_MS);

impl ApalisConfig {
    /// Refuses values that cannot describe a deployment; the error is one
    /// line starting with the field's name.
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("batch_size", self.batch_size as u64, Range::count(1, 10_000)),
            // apalis's scores are whole seconds: a shorter beat is not one.
            ("heartbeat_interval_ms", self.heartbeat_interval_ms, Range::ms(1_000, DAY_MS)),
            ("missed_heartbeats", self.missed_heartbeats as u64, Range::count(1, 1_000)),
            ("response_timeout_ms", self.response_timeout_ms, PERIOD_MS),
            ("restart_delay_ms", self.restart_delay_ms, PERIOD_MS),
            ("max_attempts", self.max_attempts as u64, Range::count(1, 1_000)),
            ("dashboard_every", self.dashboard_every as u64, Range::count(0, 1_000)),
        ];
        for (path, value, range) in fields {
            range.check(path, value)?;
        }
        Range::ms(1, MAX_DURATION_MS).check("missed_heartbeats × heartbeat_interval_ms", self.orphaned_after_ms())?;
        if self.queue.is_empty() || self.queue.contains(|c: char| c.is_whitespace() || c == ':') {
            return Err(format!("queue: a name without spaces or ':', got {:?}", self.queue));
        }
        Ok(())
    }

    /// How long a worker may be silent before its tasks are re-enqueued
    /// (`Config::orphaned_duration`).
    pub fn orphaned_after_ms(&self) -> u64 {
        self.heartbeat_interval_ms.saturating_mul(self.missed_heartbeats as u64)
    }

    /// apalis's own `Config` for this deployment.
    pub fn apalis(&self) -> apalis_redis::Config {
        apalis_redis::Config::default()
            .queue(&self.queue)
            .batch_size(self.batch_size as usize)
            .heartbeat_interval(Duration::from_millis(self.heartbeat_interval_ms))
            .missed_heartbeats(self.missed_heartbeats as usize)
            .lock_tasks(self.lock_tasks)
            .emit_events(self.emit_events)
    }
}
