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
    /// Defect switches (all off: the correct engine). Never read from a
    /// scenario file: only an explicit `--defect` or corpus entry sets them.
    #[serde(skip)]
    pub defects: Defects,
}

impl Default for EngineConfig {
    /// System A's constants (design §2.A).
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

    /// Checks the relations between constants that the engine relies on.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("concurrency", self.concurrency as u64),
            ("claim_batch_max", self.claim_batch_max as u64),
            ("idle_poll_ms", self.idle_poll_ms),
            ("renew_divisor", self.renew_divisor),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("cleanup_interval_ms", self.cleanup_interval_ms),
            ("recovery_interval_ms", self.recovery_interval_ms),
            ("repair_interval_ms", self.repair_interval_ms),
            ("retry_base_ms", self.retry_base_ms),
            ("finalize_deadline_ms", self.finalize_deadline_ms),
            ("rpc_timeout_ms", self.rpc_timeout_ms),
            ("maintenance_interval_ms", self.maintenance_interval_ms),
            ("maintenance_timeout_ms", self.maintenance_timeout_ms),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(format!("{name} must be greater than 0"));
            }
        }
        if self.dead_after_ms <= self.heartbeat_interval_ms {
            return Err("dead_after_ms must exceed heartbeat_interval_ms".into());
        }
        if self.retry_cap_ms < self.retry_base_ms {
            return Err("retry_cap_ms must be at least retry_base_ms".into());
        }
        if self.maintenance_backoff_cap_ms < self.maintenance_interval_ms {
            return Err("maintenance_backoff_cap_ms must be at least maintenance_interval_ms".into());
        }
        Ok(())
    }
}
