//! Timing constants and topology of one engine deployment.
//!
//! Every duration carries its unit in its name. Scenario files deserialize
//! straight into [`EngineConfig`], so unknown fields are refused.

use crate::defects::Defects;
use crate::task::TaskKind;
use serde::{Deserialize, Serialize};

/// Lease TTL per task kind. `None` means ownership is heartbeat-based: the
/// task stays with its owner until the owner is declared dead (system B).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseTtls {
    pub index_build_ms: Option<u64>,
    pub authz_materialization_ms: Option<u64>,
    pub job_ms: Option<u64>,
    pub stage_ms: Option<u64>,
    pub workflow_task_ms: Option<u64>,
    pub activity_ms: Option<u64>,
}

impl Default for LeaseTtls {
    fn default() -> Self {
        LeaseTtls {
            index_build_ms: Some(300_000),
            authz_materialization_ms: Some(300_000),
            job_ms: None,
            stage_ms: None,
            workflow_task_ms: Some(10_000),
            activity_ms: Some(300_000),
        }
    }
}

impl LeaseTtls {
    pub fn for_kind(&self, kind: TaskKind) -> Option<u64> {
        match kind {
            TaskKind::IndexBuild => self.index_build_ms,
            TaskKind::AuthzMaterialization => self.authz_materialization_ms,
            TaskKind::Job => self.job_ms,
            TaskKind::Stage => self.stage_ms,
            TaskKind::WorkflowTask => self.workflow_task_ms,
            TaskKind::Activity => self.activity_ms,
        }
    }
}

/// A maintenance pass kind. Passes of one kind never overlap on one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MaintenanceKind {
    /// Index finalization (system A).
    Index,
    /// Bucket finalization (system A).
    Bucket,
    /// Tenant finalization (system A).
    Tenant,
    /// Pipeline poller: reads a snapshot of pipelines and creates the task of
    /// every stage that is due (system B).
    Pipeline,
}

impl MaintenanceKind {
    pub fn name(self) -> &'static str {
        match self {
            MaintenanceKind::Index => "index",
            MaintenanceKind::Bucket => "bucket",
            MaintenanceKind::Tenant => "tenant",
            MaintenanceKind::Pipeline => "pipeline",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Permits of each worker's semaphore: tasks it executes at once.
    pub concurrency: u32,
    /// Durability shard targets of the deployment. Must not change concurrency.
    pub shard_targets: u32,
    /// At most this many tasks per claim (also bounded by free permits).
    pub claim_batch_max: u32,
    /// Sleep of the claim loop after a poll that claimed nothing.
    pub idle_poll_ms: u64,
    /// How long the store may hold a claim open waiting for work (0 = plain poll).
    pub long_poll_ms: u64,
    pub lease_ttl: LeaseTtls,
    /// A lease is renewed once its remaining time drops to TTL / this divisor.
    pub renew_divisor: u64,
    pub heartbeat_interval_ms: u64,
    /// A process silent for this long is dead; cleanup releases its tasks.
    pub dead_after_ms: u64,
    pub cleanup_interval_ms: u64,
    /// Period of the reclaim of expired (ungrouped) leases.
    pub recovery_interval_ms: u64,
    /// Period of group repair; per group, repair backs off 3 s * 2^(n-1), capped.
    pub repair_interval_ms: u64,
    pub repair_backoff_base_ms: u64,
    pub repair_backoff_cap_ms: u64,
    /// Retry backoff after a failure: base * 2^(retries-1), capped.
    pub retry_base_ms: u64,
    pub retry_cap_ms: u64,
    /// A task that failed this many times is dead.
    pub max_retries: u32,
    /// Outcome persistence (lease check + complete/fail) gives up after this;
    /// the permit is dropped and lease recovery stays authoritative.
    pub finalize_deadline_ms: u64,
    /// Deadline of ordinary store calls (heartbeat, renew, maintenance excluded).
    pub rpc_timeout_ms: u64,
    /// Maintenance pass kinds this deployment runs, and how often.
    pub maintenance: Vec<MaintenanceKind>,
    pub maintenance_interval_ms: u64,
    /// Store-side duration of one index/bucket/tenant pass.
    pub maintenance_work_ms: u64,
    /// Statement timeout of one pass's transaction (the lease-safe timeout):
    /// past it the store aborts the pass and the worker tries again later.
    pub maintenance_timeout_ms: u64,
    /// After a pass that failed, the next of its kind waits
    /// `maintenance_interval_ms * 2^(failures-1)`, at most this long.
    pub maintenance_backoff_cap_ms: u64,
    /// After a failure's backoff, tell peers the task is ready again.
    pub notify_peers: bool,
    /// The store aborts a transaction that spans round trips once it has
    /// been open this long (a SQL store's statement or idle-in-transaction
    /// timeout): nothing it wrote applies, its row locks are released, and
    /// a statement that waited this long for a lock gives up.
    pub txn_timeout_ms: u64,
    /// A task taken back from a dead owner or an expired lease is due again
    /// this long after its release (0: at once), so a task that crashed its
    /// worker does not crash the next one straight away.
    pub recovery_delay_ms: u64,
    /// Asked to stop, a worker lets its running attempts go on this long
    /// before it cancels them, then gives back what it holds and exits.
    pub stop_grace_ms: u64,
    /// Defect switches (all off: the correct engine). Never read from a
    /// scenario file: only an explicit `--defect` or corpus entry sets them.
    #[serde(skip)]
    pub defects: Defects,
}

impl Default for EngineConfig {
    /// System A's constants (docs/real-bugs.md#a).
    fn default() -> Self {
        EngineConfig {
            concurrency: 4,
            shard_targets: 1,
            claim_batch_max: 10,
            idle_poll_ms: 500,
            long_poll_ms: 0,
            lease_ttl: LeaseTtls::default(),
            renew_divisor: 3,
            heartbeat_interval_ms: 10_000,
            dead_after_ms: 60_000,
            cleanup_interval_ms: 30_000,
            recovery_interval_ms: 30_000,
            repair_interval_ms: 3_000,
            repair_backoff_base_ms: 3_000,
            repair_backoff_cap_ms: 60_000,
            retry_base_ms: 5_000,
            retry_cap_ms: 60_000,
            max_retries: 5,
            finalize_deadline_ms: 30_000,
            rpc_timeout_ms: 10_000,
            maintenance: vec![],
            maintenance_interval_ms: 5_000,
            maintenance_work_ms: 200,
            maintenance_timeout_ms: 29_000,
            maintenance_backoff_cap_ms: 60_000,
            notify_peers: false,
            txn_timeout_ms: 30_000,
            stop_grace_ms: 10_000,
            recovery_delay_ms: 0,
            defects: Defects::none(),
        }
    }
}

impl EngineConfig {
    /// Retry backoff after the `retries`-th failure.
    pub fn retry_backoff_ms(&self, retries: u32) -> u64 {
        debug_assert!(retries >= 1);
        let shift = retries.saturating_sub(1).min(20);
        self.retry_base_ms.saturating_mul(1 << shift).min(self.retry_cap_ms)
    }

    /// The wait before the next pass of a kind whose last `failures` passes
    /// failed in a row.
    pub fn maintenance_backoff_ms(&self, failures: u32) -> u64 {
        let shift = failures.saturating_sub(1).min(20);
        self.maintenance_interval_ms.saturating_mul(1 << shift).min(self.maintenance_backoff_cap_ms)
    }

    /// Repair backoff before the `n`-th consecutive repair attempt of a group.
    pub fn repair_backoff_ms(&self, n: u32) -> u64 {
        let shift = n.saturating_sub(1).min(20);
        self.repair_backoff_base_ms.saturating_mul(1 << shift).min(self.repair_backoff_cap_ms)
    }

    /// Refuses values that cannot describe a real deployment: each field
    /// against its range in one table ([`EngineConfig::RANGES`]), then the
    /// relations between fields that the engine relies on. The error is one
    /// line that starts with the field's path (`lease_ttl.activity_ms: ...`).
    pub fn validate(&self) -> Result<(), String> {
        for (path, value, range) in self.ranged_fields() {
            range.check(path, value)?;
        }
        // Relations: each names the field that would have to change.
        if self.dead_after_ms <= self.heartbeat_interval_ms {
            return Err(format!(
                "dead_after_ms: must exceed heartbeat_interval_ms ({} ms), got {} ms",
                self.heartbeat_interval_ms, self.dead_after_ms
            ));
        }
        if self.retry_cap_ms < self.retry_base_ms {
            return Err(format!(
                "retry_cap_ms: must be at least retry_base_ms ({} ms), got {} ms",
                self.retry_base_ms, self.retry_cap_ms
            ));
        }
        if self.repair_backoff_cap_ms < self.repair_backoff_base_ms {
            return Err(format!(
                "repair_backoff_cap_ms: must be at least repair_backoff_base_ms ({} ms), got {} ms",
                self.repair_backoff_base_ms, self.repair_backoff_cap_ms
            ));
        }
        if self.maintenance_backoff_cap_ms < self.maintenance_interval_ms {
            return Err(format!(
                "maintenance_backoff_cap_ms: must be at least maintenance_interval_ms ({} ms), got {} ms",
                self.maintenance_interval_ms, self.maintenance_backoff_cap_ms
            ));
        }
        Ok(())
    }

    /// Every numeric field with its path and allowed range. A lease TTL of
    /// `None` (heartbeat ownership) has no value to check.
    fn ranged_fields(&self) -> Vec<(&'static str, u64, Range)> {
        let r = &Self::RANGES;
        let mut fields = vec![
            ("concurrency", self.concurrency as u64, r.concurrency),
            ("shard_targets", self.shard_targets as u64, r.shard_targets),
            ("claim_batch_max", self.claim_batch_max as u64, r.claim_batch_max),
            ("idle_poll_ms", self.idle_poll_ms, r.period_ms),
            ("long_poll_ms", self.long_poll_ms, r.long_poll_ms),
            ("renew_divisor", self.renew_divisor, r.renew_divisor),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms, r.period_ms),
            ("dead_after_ms", self.dead_after_ms, r.span_ms),
            ("cleanup_interval_ms", self.cleanup_interval_ms, r.period_ms),
            ("recovery_interval_ms", self.recovery_interval_ms, r.period_ms),
            ("repair_interval_ms", self.repair_interval_ms, r.period_ms),
            ("repair_backoff_base_ms", self.repair_backoff_base_ms, r.backoff_ms),
            ("repair_backoff_cap_ms", self.repair_backoff_cap_ms, r.backoff_ms),
            ("retry_base_ms", self.retry_base_ms, r.span_ms),
            ("retry_cap_ms", self.retry_cap_ms, r.span_ms),
            ("max_retries", self.max_retries as u64, r.max_retries),
            ("finalize_deadline_ms", self.finalize_deadline_ms, r.period_ms),
            ("rpc_timeout_ms", self.rpc_timeout_ms, r.period_ms),
            ("maintenance_interval_ms", self.maintenance_interval_ms, r.period_ms),
            ("maintenance_work_ms", self.maintenance_work_ms, r.maintenance_work_ms),
            ("maintenance_timeout_ms", self.maintenance_timeout_ms, r.period_ms),
            ("maintenance_backoff_cap_ms", self.maintenance_backoff_cap_ms, r.span_ms),
            ("txn_timeout_ms", self.txn_timeout_ms, r.period_ms),
            ("stop_grace_ms", self.stop_grace_ms, r.period_ms),
            ("recovery_delay_ms", self.recovery_delay_ms, r.backoff_ms),
        ];
        let t = &self.lease_ttl;
        let ttls = [
            ("lease_ttl.index_build_ms", t.index_build_ms),
            ("lease_ttl.authz_materialization_ms", t.authz_materialization_ms),
            ("lease_ttl.job_ms", t.job_ms),
            ("lease_ttl.stage_ms", t.stage_ms),
            ("lease_ttl.workflow_task_ms", t.workflow_task_ms),
            ("lease_ttl.activity_ms", t.activity_ms),
        ];
        fields.extend(ttls.into_iter().filter_map(|(path, ttl)| ttl.map(|ms| (path, ms, r.lease_ttl_ms))));
        fields
    }

    /// What each kind of field may be. The caps live here and nowhere else.
    pub const RANGES: EngineRanges = EngineRanges {
        // A worker with no permit claims nothing; more than ten thousand tasks
        // at once on one process is not a deployment this engine models.
        concurrency: Range::count(1, 10_000),
        // A deployment has at least one durability target (zero describes no
        // storage at all); it must never change concurrency either way.
        shard_targets: Range::count(1, 10_000),
        claim_batch_max: Range::count(1, 10_000),
        // Loops that repeat (polls, heartbeats, cleanup, recovery, repair,
        // maintenance) and single-call deadlines: a period of 0 would spin,
        // and one longer than a day is no longer a background loop.
        period_ms: Range::ms(1, DAY_MS),
        // 0 means plain polls; the store never holds a poll open for a day.
        long_poll_ms: Range::ms(0, DAY_MS),
        // Renewal starts when TTL / divisor remains: with a divisor of 1 it
        // would start at once and never stop; past 100 it starts so close to
        // expiry that no network round trip fits.
        renew_divisor: Range::count(2, 100),
        // Timeouts and backoffs that a real system may stretch to weeks.
        span_ms: Range::ms(1, MAX_DURATION_MS),
        // 0 means repair looks again at every repair interval (no backoff).
        backoff_ms: Range::ms(0, MAX_DURATION_MS),
        // 0 means no retries: the first failure is final.
        max_retries: Range::count(0, u32::MAX as u64),
        // 0 means a pass that does its store work at once.
        maintenance_work_ms: Range::ms(0, DAY_MS),
        // A lease shorter than 100 ms expires before one store round trip
        // could renew it (every grant is a revocation in waiting); no real
        // lease is a month.
        lease_ttl_ms: Range::ms(100, MAX_DURATION_MS),
    };
}

/// One day, in ms.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1_000;

/// No duration that describes a deployment (or a simulated run of one) is
/// longer than this.
pub const MAX_DURATION_MS: u64 = 30 * DAY_MS;

/// The ranges of [`EngineConfig`]'s fields, grouped by what the field means.
#[derive(Debug, Clone, Copy)]
pub struct EngineRanges {
    pub concurrency: Range,
    pub shard_targets: Range,
    pub claim_batch_max: Range,
    pub period_ms: Range,
    pub long_poll_ms: Range,
    pub renew_divisor: Range,
    pub span_ms: Range,
    pub backoff_ms: Range,
    pub max_retries: Range,
    pub maintenance_work_ms: Range,
    pub lease_ttl_ms: Range,
}

/// The values a numeric field may take, inclusive, and their unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub min: u64,
    pub max: u64,
    pub unit: Unit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ms,
    Count,
}

impl Range {
    /// A duration in milliseconds.
    pub const fn ms(min: u64, max: u64) -> Range {
        Range { min, max, unit: Unit::Ms }
    }

    /// A count (permits, tasks, a divisor...).
    pub const fn count(min: u64, max: u64) -> Range {
        Range { min, max, unit: Unit::Count }
    }

    pub fn contains(self, value: u64) -> bool {
        (self.min..=self.max).contains(&value)
    }

    /// `Ok` if `value` is in range; otherwise one line naming `path`, the
    /// allowed range and the value.
    pub fn check(self, path: &str, value: u64) -> Result<(), String> {
        if self.contains(value) {
            return Ok(());
        }
        Err(format!(
            "{path}: must be from {} to {}, got {}",
            self.show(self.min),
            self.show(self.max),
            self.show(value)
        ))
    }

    /// A value in this range's unit; long durations also in days or hours.
    fn show(self, value: u64) -> String {
        const HOUR_MS: u64 = 60 * 60 * 1_000;
        if self.unit == Unit::Count {
            return value.to_string();
        }
        let plural = |n: u64, unit: &str| if n == 1 { format!("1 {unit}") } else { format!("{n} {unit}s") };
        if value >= DAY_MS && value.is_multiple_of(DAY_MS) {
            format!("{value} ms ({})", plural(value / DAY_MS, "day"))
        } else if value >= HOUR_MS && value.is_multiple_of(HOUR_MS) {
            format!("{value} ms ({})", plural(value / HOUR_MS, "hour"))
        } else {
            format!("{value} ms")
        }
    }
}
