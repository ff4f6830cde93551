//! A scenario's `[engine]` for graphile_worker: the options a user gives
//! `WorkerOptions` (and its recovery and shutdown configurations), and the
//! deployment around it (the database connection's deadlines).
//!
//! Every duration carries its unit in its name; unknown fields are refused,
//! and every value is checked against a range, naming its field.

use leasesim_world::ranges::{Range, DAY_MS, MAX_DURATION_MS};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GraphileConfig {
    /// Jobs one worker runs at once (`WorkerOptions::concurrency`).
    pub concurrency: u32,
    /// How often an idle worker polls for jobs (`poll_interval`; no LISTEN:
    /// the simulated database has no notifications, as with a pooler that
    /// drops them).
    pub poll_interval_ms: u64,
    /// Worker recovery: heartbeats, and sweeps that release the jobs of
    /// workers silent past `sweep_threshold_ms` (`WorkerRecoveryConfig`).
    /// Off: a worker that dies keeps its jobs locked.
    pub recovery: bool,
    pub heartbeat_interval_ms: u64,
    pub sweep_interval_ms: u64,
    pub sweep_threshold_ms: u64,
    /// A recovered job is not run again before this (`recovery_delay`).
    pub recovery_delay_ms: u64,
    /// Attempts a job gets (`JobSpec::max_attempts`, graphile's default 25).
    pub max_attempts: u32,
    /// The driver gives up on a statement whose answer has not come back in
    /// this long (a TCP user timeout): the call fails with SQLSTATE 08006.
    pub connection_timeout_ms: u64,
    /// The database aborts a transaction left idle this long
    /// (`idle_in_transaction_session_timeout`).
    pub txn_timeout_ms: u64,
    /// A statement waiting for a row or advisory lock this long fails with
    /// SQLSTATE 55P03 (`lock_timeout`).
    pub lock_timeout_ms: u64,
    /// After a worker's `init` or `run` fails, its process starts a new
    /// worker after this long (a supervisor's restart).
    pub restart_delay_ms: u64,
    /// Graceful shutdown: in-flight jobs get this long (`grace_period`).
    pub grace_period_ms: u64,
    /// Batch job completions, flushed after this delay
    /// (`complete_job_batch_delay`; unset: each completion is its own statement).
    pub complete_batch_delay_ms: Option<u64>,
    /// Batch permanent failures likewise (`fail_job_batch_delay`).
    pub fail_batch_delay_ms: Option<u64>,
}

impl Default for GraphileConfig {
    /// graphile_worker's own defaults where it has them.
    fn default() -> Self {
        GraphileConfig {
            concurrency: 4,
            poll_interval_ms: 1_000,
            recovery: true,
            heartbeat_interval_ms: 30_000,
            sweep_interval_ms: 60_000,
            sweep_threshold_ms: 300_000,
            recovery_delay_ms: 30_000,
            max_attempts: 25,
            connection_timeout_ms: 30_000,
            txn_timeout_ms: 60_000,
            lock_timeout_ms: 30_000,
            restart_delay_ms: 1_000,
            grace_period_ms: 5_000,
            complete_batch_delay_ms: None,
            fail_batch_delay_ms: None,
        }
    }
}

/// A period of 0 would spin; one longer than a day is no longer a loop.
const PERIOD_MS: Range = Range::ms(1, DAY_MS);
const SPAN_MS: Range = Range::ms(1, MAX_DURATION_MS);

impl GraphileConfig {
    /// Refuses values that cannot describe a deployment; the error is one
    /// line starting with the field's name.
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("concurrency", self.concurrency as u64, Range::count(1, 1_000)),
            ("poll_interval_ms", self.poll_interval_ms, PERIOD_MS),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms, PERIOD_MS),
            ("sweep_interval_ms", self.sweep_interval_ms, PERIOD_MS),
            ("sweep_threshold_ms", self.sweep_threshold_ms, SPAN_MS),
            ("recovery_delay_ms", self.recovery_delay_ms, Range::ms(0, MAX_DURATION_MS)),
            // graphile keeps attempts in a smallint.
            ("max_attempts", self.max_attempts as u64, Range::count(1, i16::MAX as u64)),
            ("connection_timeout_ms", self.connection_timeout_ms, PERIOD_MS),
            ("txn_timeout_ms", self.txn_timeout_ms, PERIOD_MS),
            ("lock_timeout_ms", self.lock_timeout_ms, PERIOD_MS),
            ("restart_delay_ms", self.restart_delay_ms, PERIOD_MS),
            ("grace_period_ms", self.grace_period_ms, Range::ms(0, DAY_MS)),
        ];
        for (path, value, range) in fields {
            range.check(path, value)?;
        }
        for (path, value) in [
            ("complete_batch_delay_ms", self.complete_batch_delay_ms),
            ("fail_batch_delay_ms", self.fail_batch_delay_ms),
        ] {
            if let Some(ms) = value {
                PERIOD_MS.check(path, ms)?;
            }
        }
        if self.recovery && self.sweep_threshold_ms <= self.heartbeat_interval_ms {
            return Err(format!(
                "sweep_threshold_ms: must exceed heartbeat_interval_ms ({} ms) or every worker looks dead, got {} ms",
                self.heartbeat_interval_ms, self.sweep_threshold_ms
            ));
        }
        Ok(())
    }
}
