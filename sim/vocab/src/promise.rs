//! What an engine promises, as data it declares, and what it can do.
//!
//! The checkers never call an engine's own helpers: a bug there would agree
//! with itself. Each engine's adapter states its promises here, from its
//! configuration's documented meaning, and the checkers re-derive every
//! deadline from these values alone.

use crate::task::{MaintenanceKind, TaskKind};
use serde::{Deserialize, Serialize};

/// Lease term per task kind. `None`: ownership rests on the holder's
/// liveness (heartbeats), not on a lease that expires.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTerms {
    pub index_build_ms: Option<u64>,
    pub authz_materialization_ms: Option<u64>,
    pub job_ms: Option<u64>,
    pub stage_ms: Option<u64>,
    pub workflow_task_ms: Option<u64>,
    pub activity_ms: Option<u64>,
}

impl LeaseTerms {
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

/// When a failed task may run again, after its `n`-th failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backoff {
    /// `base_ms * 2^(n-1)`, at most `cap_ms`, from the failure's commit.
    Doubling { base_ms: u64, cap_ms: u64 },
    /// `e^min(n, max_exponent)` units (rounded to the store's microseconds),
    /// from the later of the failure's commit and the task's previous due
    /// time (a job queue's `greatest(now(), run_at) + exp(...)`).
    Exponential { unit_ms: u64, max_exponent: u32 },
}

/// Everything the checkers hold an engine to, in its own configured values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promises {
    /// Tasks one worker process runs at once.
    pub concurrency: u32,
    /// At most this many tasks per claim.
    pub claim_batch_max: u32,
    /// The longest an idle worker waits before it claims again.
    pub idle_poll_ms: u64,
    /// How long the store may hold a claim open waiting for work (0: polls).
    pub long_poll_ms: u64,
    pub lease_ttl: LeaseTerms,
    /// A lease is renewed once TTL / this divisor remains.
    pub renew_divisor: u64,
    pub heartbeat_interval_ms: u64,
    /// A holder silent for this long is dead: recovery may release its tasks.
    pub dead_after_ms: u64,
    /// Period of the recovery pass that releases dead holders' tasks.
    pub cleanup_interval_ms: u64,
    pub backoff: Backoff,
    /// A task dies on the failure that brings it past this many retries.
    pub max_retries: u32,
    /// Outcome persistence gives up after this (the slot is freed anyway).
    pub finalize_deadline_ms: u64,
    /// Deadline of ordinary store calls.
    pub rpc_timeout_ms: u64,
    pub maintenance: Vec<MaintenanceKind>,
    pub maintenance_interval_ms: u64,
    /// The store aborts a transaction open this long.
    pub txn_timeout_ms: u64,
    /// A task released by recovery is not due again before this much later.
    pub recovery_delay_ms: u64,
    /// In which order a claim takes the due tasks it may take.
    pub claim_order: ClaimOrder,
    /// When the store reads its clock for a statement (its `now()`).
    pub statement_time: StatementTime,
    /// What the client does with an enqueue that got no answer, or an
    /// answer it retries (`None`: it promises no retry; one send is final).
    pub enqueue_retry: Option<EnqueueRetry>,
    /// Does a worker try an outcome write (complete, fail, their
    /// transaction) again, within its finalization deadline, after a refusal
    /// that says nothing applied (40001, 40P01, 55P03, 57014, a transaction
    /// no longer open)? `false`: such a refusal ends the attempt's outcome,
    /// and recovery runs the task again.
    pub outcome_retry: bool,
    /// Is an outcome write sent again by the attempt whose first copy
    /// already applied answered as applied (so the attempt, whose first
    /// answer was lost, still learns its completion committed and reports
    /// it)? `false`: how such a retry is answered is not judged.
    pub outcome_idempotent: bool,
    /// Does a worker's claim ask for every permit it holds free, up to
    /// `claim_batch_max` (so a permit it says it gave back is free again)?
    /// `false`: how little a claim asks for is not judged.
    #[serde(default)]
    pub claim_fills_free_permits: bool,
    /// The passes every live process sends on a period (recovery, repair,
    /// maintenance), each with how long it may wait between two passes.
    #[serde(default)]
    pub cadences: Vec<Cadence>,
    /// Which request of a newer incarnation of a process ends the open
    /// transactions of its older ones at the store.
    #[serde(default)]
    pub replaced_txns_end: ReplacedTxnsEnd,
    /// From when the store counts `txn_timeout_ms` down.
    #[serde(default)]
    pub txn_timeout_from: TxnTimeoutFrom,
    /// Store calls one heartbeat round makes, one after another, before the
    /// next interval starts (apalis: keep-alive, lease renewal, orphan
    /// re-enqueueing; the others: the heartbeat alone). Each may take up to
    /// `rpc_timeout_ms`.
    #[serde(default = "one_call")]
    pub heartbeat_calls: u32,
    /// A release naming an owner (`ReleaseOwners`) names its whole process:
    /// every incarnation, later ones included (apalis: a worker name stands
    /// for every run of its process, and a re-enqueue held up at the store
    /// may run after the name's next run fetched). Whether each release had
    /// a reason stays `lease-revocation`'s to judge.
    #[serde(default)]
    pub releases_by_process: bool,
    /// How long a process asked to stop lets its running attempts go on
    /// before it cancels them (with `Capabilities::graceful_stop`).
    #[serde(default)]
    pub stop_grace_ms: u64,
}

/// A span no run reaches: a promise of "never" (no maintenance pass, no
/// transaction timeout), safe to add to any simulated instant.
pub const NEVER_MS: u64 = u64::MAX / 4;

/// The promises every engine must choose. No value of these is neutral: a
/// dead-after too long makes every recovery look unjustified, one too short
/// excuses a lost task; a finalization deadline too long hides a hung
/// outcome write. Each comes from the engine's own configuration
/// (docs/promises.md says how, field by field, with the three engines'
/// choices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Core {
    pub concurrency: u32,
    pub claim_batch_max: u32,
    pub idle_poll_ms: u64,
    pub lease_ttl: LeaseTerms,
    pub heartbeat_interval_ms: u64,
    pub dead_after_ms: u64,
    pub cleanup_interval_ms: u64,
    pub backoff: Backoff,
    pub max_retries: u32,
    pub finalize_deadline_ms: u64,
    pub rpc_timeout_ms: u64,
}

impl Promises {
    /// `core`, and for every other promise what an engine without that
    /// feature declares: no long polls, leases renewed at half their term,
    /// no maintenance or transactions (their intervals and timeouts
    /// [`NEVER_MS`]), released tasks due at once, claims in no promised
    /// order, a statement's time read when it starts, no enqueue or outcome
    /// retries, no cadences, one call per heartbeat, releases per
    /// incarnation. Override any with struct update syntax:
    /// `Promises { heartbeat_calls: 3, ..Promises::new(core) }`.
    pub fn new(core: Core) -> Promises {
        let Core {
            concurrency,
            claim_batch_max,
            idle_poll_ms,
            lease_ttl,
            heartbeat_interval_ms,
            dead_after_ms,
            cleanup_interval_ms,
            backoff,
            max_retries,
            finalize_deadline_ms,
            rpc_timeout_ms,
        } = core;
        Promises {
            concurrency,
            claim_batch_max,
            idle_poll_ms,
            long_poll_ms: 0,
            lease_ttl,
            renew_divisor: 2,
            heartbeat_interval_ms,
            dead_after_ms,
            cleanup_interval_ms,
            backoff,
            max_retries,
            finalize_deadline_ms,
            rpc_timeout_ms,
            maintenance: Vec::new(),
            maintenance_interval_ms: NEVER_MS,
            txn_timeout_ms: NEVER_MS,
            recovery_delay_ms: 0,
            claim_order: ClaimOrder::Any,
            statement_time: StatementTime::Start,
            enqueue_retry: None,
            outcome_retry: false,
            outcome_idempotent: false,
            claim_fills_free_permits: false,
            cadences: Vec::new(),
            replaced_txns_end: ReplacedTxnsEnd::default(),
            txn_timeout_from: TxnTimeoutFrom::default(),
            heartbeat_calls: 1,
            releases_by_process: false,
            stop_grace_ms: 0,
        }
    }
}

/// A periodic pass, named by the request that starts it at the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PassKind {
    ReleaseDead,
    ReclaimExpired,
    Repair,
    /// A maintenance pass of this kind (a pipeline pass starts with its
    /// snapshot and goes on until its stage enqueues end).
    Maintain(MaintenanceKind),
}

impl PassKind {
    /// The pass a request starts, and the process that sends it.
    pub fn of(op: &crate::op::Op) -> Option<(crate::ids::Owner, PassKind)> {
        use crate::op::Op;
        match op {
            Op::ReleaseDead { by } => Some((*by, PassKind::ReleaseDead)),
            Op::ReclaimExpired { by } => Some((*by, PassKind::ReclaimExpired)),
            Op::Repair { by } => Some((*by, PassKind::Repair)),
            Op::Maintain { owner, kind, .. } => Some((*owner, PassKind::Maintain(*kind))),
            Op::PipelineSnapshot { by } => Some((*by, PassKind::Maintain(MaintenanceKind::Pipeline))),
            _ => None,
        }
    }

    pub fn name(self) -> String {
        match self {
            PassKind::ReleaseDead => "release-dead".into(),
            PassKind::ReclaimExpired => "reclaim-expired".into(),
            PassKind::Repair => "repair".into(),
            PassKind::Maintain(kind) => format!("{} maintenance", kind.name()),
        }
    }
}

/// How often a process sends one kind of pass: the next arrives at most
/// `wait + late_ms` after the store answered the previous one. The wait is
/// `interval_ms` after a pass the store did its work for; after the k-th
/// failed pass in a row, `min(interval_ms * 2^(k-1), backoff_cap_ms)` from
/// when the engine noticed the failure (at most `late_ms` after the
/// answer). A pass that does not back off has `backoff_cap_ms ==
/// interval_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cadence {
    pub pass: PassKind,
    pub interval_ms: u64,
    pub backoff_cap_ms: u64,
    /// The engine's own work around the wait: the answer's way back, the
    /// rest of its tick, the loop round that starts the next pass.
    pub late_ms: u64,
}

/// The client's retry promise for one enqueue call: it sends up to `sends`
/// times (the same call, so the same idempotency key) while a send gets no
/// answer within `send_timeout_ms` or an answer refused for a reason in
/// `retry_on`, and tells the application the call failed only then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueueRetry {
    pub sends: u32,
    pub send_timeout_ms: u64,
    pub retry_on: Vec<crate::op::Refusal>,
}

/// When the store reads its clock for what a statement writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StatementTime {
    /// When it applies (commits).
    Commit,
    /// When it starts (PostgreSQL's `now()`: the transaction's start, so a
    /// statement that waited for a lock writes the time it began).
    Start,
}

/// When the store ends the open transactions of a process incarnation that
/// a newer one replaced. Until then a statement of one may still be
/// answered as open (a COMMIT the store held through the restart commits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplacedTxnsEnd {
    /// At the newer incarnation's first request of any kind: its arrival
    /// on a new connection tells the store the old connections are gone
    /// (a PostgreSQL model that closes a replaced process's connections).
    /// The default: the rule the checkers judged before engines declared it.
    #[default]
    AnyRequest,
    /// At the newer incarnation's first claim or heartbeat, the signs of
    /// life from which the store learns of a restart (its other requests,
    /// recovery and maintenance passes, tell the store nothing of it).
    ClaimOrHeartbeat,
}

fn one_call() -> u32 {
    1
}

/// From when the store counts a transaction's `txn_timeout_ms`: the
/// built-in store from its first statement, PostgreSQL's
/// `idle_in_transaction_session_timeout` from the end of its latest one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxnTimeoutFrom {
    /// From its first statement: a transaction ends `txn_timeout_ms` after
    /// it opened, however busy it was. The default: the rule the checkers
    /// judged before engines declared it.
    #[default]
    Open,
    /// From the answer of its latest statement: it ends after standing
    /// idle that long (each statement starts the count again).
    Idle,
}

/// The order a claim takes due tasks in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimOrder {
    /// By due time, then id: exactly the first ones.
    DueThenId,
    /// By due time; among tasks due at the same instant, any.
    Due,
    /// Any due tasks, in an order of the engine's own (apalis fetches the
    /// head of a list that pushes, promotions and re-enqueued orphans join
    /// at the tail): every granted task must be due; that none waits
    /// forever is claim-progress's to judge.
    Any,
}

/// What an engine can do. An invariant or coverage point about something
/// an engine cannot do is reported "not applicable" for it, never "passed".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// It reports what it does through an observer seam (testimony).
    pub testimony: bool,
    /// Worker slots (permits) are part of its testimony.
    pub permits: bool,
    /// Leases that expire, with renewals and lease checks.
    pub leases: bool,
    /// Each grant's row carries a fresh attempt number (the previous + 1).
    pub fresh_attempts: bool,
    /// Ownership by holder liveness: heartbeats and release of dead holders.
    pub heartbeats: bool,
    /// Same-owner recovery of tasks an owner holds and does not run.
    pub orphan_recovery: bool,
    /// The store answers an outcome write with whether it applied.
    pub outcome_answers: bool,
    /// Groups of tasks repaired together (workflow runs).
    pub groups: bool,
    pub pipelines: bool,
    pub indexes: bool,
    pub maintenance: bool,
    /// Transactions that span round trips.
    pub transactions: bool,
    /// Named queues that run one task at a time.
    pub named_queues: bool,
    /// Peer notes between workers (a retry time passed on).
    pub peer_notes: bool,
    /// Enqueues carry an idempotency key.
    pub enqueue_keys: bool,
    /// The application is told of a committed completion.
    pub callbacks: bool,
    /// A process's clock can be offset from the store's (its clock is a seam).
    pub clock_seam: bool,
    /// The store may hold a claim open waiting for work (long polls).
    pub long_polls: bool,
    /// A task body may fail fatally (no retry).
    pub fatal_errors: bool,
    /// The network may deliver a request twice (datagrams; not a connection).
    pub redelivery: bool,
    /// Periodic passes on a declared cadence ([`Promises::cadences`]).
    pub periodic_passes: bool,
    /// A process tells the store it is leaving (deregisters) before it
    /// exits, and the store keeps or frees what it held.
    pub deregistration: bool,
    /// Asked to stop, a process stops claiming, lets its attempts end
    /// within `Promises::stop_grace_ms`, cancels the rest, gives back every
    /// task it holds and exits (`graceful-stop` judges it).
    #[serde(default)]
    pub graceful_stop: bool,
}

impl Default for Capabilities {
    /// [`Capabilities::NONE`]: an adapter turns on what its engine does.
    fn default() -> Self {
        Capabilities::NONE
    }
}

impl Capabilities {
    /// Nothing beyond what every engine does (claim, run, complete or fail
    /// a task): every invariant about a capability is "not applicable"
    /// until the adapter turns it on (`Capabilities { heartbeats: true,
    /// ..Capabilities::NONE }`).
    pub const NONE: Capabilities = Capabilities {
        testimony: false,
        permits: false,
        leases: false,
        fresh_attempts: false,
        heartbeats: false,
        orphan_recovery: false,
        outcome_answers: false,
        groups: false,
        pipelines: false,
        indexes: false,
        maintenance: false,
        transactions: false,
        named_queues: false,
        peer_notes: false,
        enqueue_keys: false,
        callbacks: false,
        clock_seam: false,
        long_polls: false,
        fatal_errors: false,
        redelivery: false,
        periodic_passes: false,
        deregistration: false,
        graceful_stop: false,
    };

    /// Everything: the built-in engine.
    pub const ALL: Capabilities = Capabilities {
        testimony: true,
        permits: true,
        leases: true,
        fresh_attempts: true,
        heartbeats: true,
        orphan_recovery: true,
        outcome_answers: true,
        groups: true,
        pipelines: true,
        indexes: true,
        maintenance: true,
        transactions: true,
        named_queues: true,
        peer_notes: true,
        enqueue_keys: true,
        callbacks: true,
        clock_seam: true,
        long_polls: true,
        fatal_errors: true,
        redelivery: true,
        periodic_passes: true,
        deregistration: true,
        graceful_stop: true,
    };

    /// Every capability by name, for `cargo sim list` and messages.
    pub fn named(&self) -> Vec<(&'static str, bool)> {
        vec![
            ("testimony", self.testimony),
            ("permits", self.permits),
            ("leases", self.leases),
            ("fresh-attempts", self.fresh_attempts),
            ("heartbeats", self.heartbeats),
            ("orphan-recovery", self.orphan_recovery),
            ("outcome-answers", self.outcome_answers),
            ("groups", self.groups),
            ("pipelines", self.pipelines),
            ("indexes", self.indexes),
            ("maintenance", self.maintenance),
            ("transactions", self.transactions),
            ("named-queues", self.named_queues),
            ("peer-notes", self.peer_notes),
            ("enqueue-keys", self.enqueue_keys),
            ("callbacks", self.callbacks),
            ("clock-seam", self.clock_seam),
            ("long-polls", self.long_polls),
            ("fatal-errors", self.fatal_errors),
            ("redelivery", self.redelivery),
            ("periodic-passes", self.periodic_passes),
            ("deregistration", self.deregistration),
            ("graceful-stop", self.graceful_stop),
        ]
    }
}

/// A run is a fault phase, then a heal (faults stop, paused processes resume,
/// dead ones restart), then a liveness phase in which the world must converge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phases {
    pub fault_phase_ms: u64,
    pub heal_phase_ms: u64,
    /// End the liveness phase early once the world is quiet (FoundationDB's
    /// "quiet database"): settled (every client call answered, every task
    /// done or dead, every stage done or its task dead, every built index
    /// materialized), with the store unchanged for `quiet_end_ms`, as seen
    /// by looks four times per period after the heal. Unset: the whole
    /// liveness phase runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_end_ms: Option<u64>,
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
