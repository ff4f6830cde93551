//! The built-in engine in the harness's words: each of its requests
//! classified as an [`Op`], each answer normalized to a [`Response`], each
//! stored row to a [`Row`], each event (its testimony) to an [`Event`].
//!
//! This is the only place that reads the built-in engine's protocol and row
//! types for the history; the checkers see what comes out of here. Every
//! conversion is field by field, so nothing of the engine's is lost.

use leasesim::event::{Event as E, ReleaseCause as EC, WriteKind as EW};
use leasesim::proto::{Grant as EG, PeerNote as EN, Rejection as ER, Request as Q, Response as A};
use leasesim::{config, handler, ids, store, task};
use leasesim_vocab::ids::{Fence, Owner, StageRef, TxnId};
use leasesim_vocab::op::{Grant, Op, PeerNote, Refusal, Response};
use leasesim_vocab::task::{MaintenanceKind, Row, StageRow, TaskError, TaskKind, TaskSpec, TaskState};
use leasesim_vocab::testimony::{Event as V, ReleaseCause, WriteKind};

pub fn owner(o: ids::Owner) -> Owner {
    Owner { proc: o.proc, incarnation: o.incarnation }
}

pub fn engine_owner(o: Owner) -> ids::Owner {
    ids::Owner { proc: o.proc, incarnation: o.incarnation }
}

pub fn fence(f: ids::Fence) -> Fence {
    Fence { task: f.task, attempt: f.attempt, owner: owner(f.owner) }
}

pub fn stage(s: ids::StageRef) -> StageRef {
    StageRef { pipeline: s.pipeline, index: s.index }
}

fn engine_stage(s: StageRef) -> ids::StageRef {
    ids::StageRef { pipeline: s.pipeline, index: s.index }
}

pub fn txn(t: ids::TxnId) -> TxnId {
    TxnId { owner: owner(t.owner), seq: t.seq }
}

pub fn kind(k: task::TaskKind) -> TaskKind {
    match k {
        task::TaskKind::IndexBuild => TaskKind::IndexBuild,
        task::TaskKind::AuthzMaterialization => TaskKind::AuthzMaterialization,
        task::TaskKind::Job => TaskKind::Job,
        task::TaskKind::Stage => TaskKind::Stage,
        task::TaskKind::WorkflowTask => TaskKind::WorkflowTask,
        task::TaskKind::Activity => TaskKind::Activity,
    }
}

pub fn engine_kind(k: TaskKind) -> task::TaskKind {
    match k {
        TaskKind::IndexBuild => task::TaskKind::IndexBuild,
        TaskKind::AuthzMaterialization => task::TaskKind::AuthzMaterialization,
        TaskKind::Job => task::TaskKind::Job,
        TaskKind::Stage => task::TaskKind::Stage,
        TaskKind::WorkflowTask => task::TaskKind::WorkflowTask,
        TaskKind::Activity => task::TaskKind::Activity,
    }
}

pub fn spec(s: &task::TaskSpec) -> TaskSpec {
    TaskSpec {
        kind: kind(s.kind),
        group: s.group,
        stage: s.stage.map(stage),
        index: s.index,
        not_before_ms: s.not_before_ms,
        queue: None,
    }
}

/// The engine's spec of what the workload asks for (the built-in engine has
/// no named queues; a scenario for it never sets one).
pub fn engine_spec(s: &TaskSpec) -> task::TaskSpec {
    task::TaskSpec {
        kind: engine_kind(s.kind),
        group: s.group,
        stage: s.stage.map(engine_stage),
        index: s.index,
        not_before_ms: s.not_before_ms,
    }
}

fn state(s: task::TaskState) -> TaskState {
    match s {
        task::TaskState::Ready => TaskState::Ready,
        task::TaskState::Leased => TaskState::Leased,
        task::TaskState::Done => TaskState::Done,
        task::TaskState::Dead => TaskState::Dead,
    }
}

pub fn row(t: &task::Task) -> Row {
    Row {
        id: t.id,
        spec: spec(&t.spec),
        state: state(t.state),
        owner: t.owner.map(owner),
        attempt: t.attempt,
        lease_expiry_ms: t.lease_expiry_ms,
        retries: t.retries,
        retry_at_ms: t.retry_at_ms,
        updated_ms: t.updated_ms,
        repair_count: t.repair_count,
    }
}

pub fn stage_row(r: &store::StageRow) -> StageRow {
    StageRow { task: r.task, done: r.done }
}

pub fn task_error(e: handler::TaskError) -> TaskError {
    match e {
        handler::TaskError::Conflict => TaskError::Conflict,
        handler::TaskError::Fatal => TaskError::Fatal,
    }
}

pub fn engine_task_error(e: TaskError) -> handler::TaskError {
    match e {
        TaskError::Conflict => handler::TaskError::Conflict,
        TaskError::Fatal => handler::TaskError::Fatal,
    }
}

pub fn maintenance(k: config::MaintenanceKind) -> MaintenanceKind {
    match k {
        config::MaintenanceKind::Index => MaintenanceKind::Index,
        config::MaintenanceKind::Bucket => MaintenanceKind::Bucket,
        config::MaintenanceKind::Tenant => MaintenanceKind::Tenant,
        config::MaintenanceKind::Pipeline => MaintenanceKind::Pipeline,
    }
}

pub fn rejection(r: ER) -> Refusal {
    match r {
        ER::Missing => Refusal::Missing,
        ER::Superseded => Refusal::Superseded,
        ER::NotOwner => Refusal::NotOwner,
        ER::Terminal => Refusal::Terminal,
        ER::Expired => Refusal::Expired,
        ER::StageGuard => Refusal::StageGuard,
        ER::Conflict => Refusal::Conflict,
        ER::TimedOut => Refusal::TimedOut,
        ER::TxnClosed => Refusal::TxnClosed,
        ER::LockTimeout => Refusal::LockTimeout,
    }
}

/// A request, classified.
pub fn op(q: &Q) -> Op {
    match q {
        Q::Enqueue { spec, key } => Op::Enqueue { spec: self::spec(spec), key: *key },
        Q::CreatePipeline { pipeline, stages } => Op::CreatePipeline { pipeline: *pipeline, stages: *stages },
        Q::Claim { owner, max, wait_ms } => Op::Claim { owner: self::owner(*owner), max: *max, wait_ms: *wait_ms },
        Q::Heartbeat { owner } => Op::Heartbeat { owner: self::owner(*owner) },
        Q::Renew { fence } => Op::Renew { fence: self::fence(*fence) },
        Q::LeaseValid { fence } => Op::LeaseValid { fence: self::fence(*fence) },
        Q::Complete { fence } => Op::Complete { fence: self::fence(*fence) },
        Q::Fail { fence, error } => Op::Fail { fence: self::fence(*fence), error: task_error(*error) },
        Q::ClearStageLink { fence } => Op::ClearStageLink { fence: self::fence(*fence) },
        Q::ReleaseDead { by } => Op::ReleaseDead { by: owner(*by) },
        Q::ReleaseOrphans { owner, running, older_than_ms, as_of_ms } => Op::ReleaseOrphans {
            owner: self::owner(*owner),
            running: running.clone(),
            older_than_ms: *older_than_ms,
            as_of_ms: *as_of_ms,
        },
        Q::ReclaimExpired { by } => Op::ReclaimExpired { by: owner(*by) },
        Q::Repair { by } => Op::Repair { by: owner(*by) },
        Q::Maintain { owner, kind, timeout_ms } => {
            Op::Maintain { owner: self::owner(*owner), kind: maintenance(*kind), timeout_ms: *timeout_ms }
        }
        Q::PipelineSnapshot { by } => Op::PipelineSnapshot { by: owner(*by) },
        Q::EnqueueStage { stage } => Op::EnqueueStage { stage: self::stage(*stage) },
        Q::QueryIndex { index, lag_timeout_ms } => Op::QueryIndex { index: *index, lag_timeout_ms: *lag_timeout_ms },
        Q::Exec { txn, stmt, commit } => Op::Exec { txn: self::txn(*txn), stmt: Box::new(op(stmt)), commit: *commit },
        Q::Rollback { txn } => Op::Rollback { txn: self::txn(*txn) },
        Q::Deregister { owner } => Op::Deregister { owner: self::owner(*owner) },
    }
}

fn grant(g: &EG) -> Grant {
    Grant { fence: fence(g.fence), kind: kind(g.kind), lease_expiry_ms: g.lease_expiry_ms }
}

/// An answer, normalized.
pub fn response(a: &A) -> Response {
    match a {
        A::Enqueued { task } => Response::Enqueued { task: *task },
        A::Claimed { grants } => Response::Claimed { grants: grants.iter().map(grant).collect() },
        A::Ack => Response::Ack,
        A::Renewed { lease_expiry_ms } => Response::Renewed { lease_expiry_ms: *lease_expiry_ms },
        A::Valid { valid } => Response::Valid { valid: *valid },
        A::Applied { retries, retry_at_ms } => Response::Applied { retries: *retries, retry_at_ms: *retry_at_ms },
        A::Rejected { reason } => Response::Rejected { reason: rejection(*reason) },
        A::Released { tasks } => Response::Released { tasks: *tasks },
        A::Snapshot { due } => Response::Snapshot { due: due.iter().copied().map(stage).collect() },
        A::Query { materialized } => Response::Query { materialized: *materialized },
    }
}

pub fn note(n: &EN) -> PeerNote {
    PeerNote { task: n.task, retries: n.retries, retry_at_ms: n.retry_at_ms, from: owner(n.from) }
}

fn cause(c: EC) -> ReleaseCause {
    match c {
        EC::Expired => ReleaseCause::Expired,
        EC::DeadOwner => ReleaseCause::DeadOwner,
        EC::Repair => ReleaseCause::Repair,
        EC::Orphaned => ReleaseCause::Orphaned,
    }
}

fn write(w: EW) -> WriteKind {
    match w {
        EW::Complete => WriteKind::Complete,
        EW::Fail => WriteKind::Fail,
        EW::Renew => WriteKind::Renew,
        EW::ClearStageLink => WriteKind::ClearStageLink,
    }
}

/// An event of the engine's, as testimony.
pub fn event(e: E) -> V {
    match e {
        E::TaskCreated { task, spec, retry_at_ms } => V::TaskCreated { task, spec: self::spec(&spec), retry_at_ms },
        E::StageEnqueueRefused { stage, reason } => {
            V::StageEnqueueRefused { stage: self::stage(stage), reason: self::rejection(reason) }
        }
        E::PipelineCreated { pipeline, stages } => V::PipelineCreated { pipeline, stages },
        E::LeaseGranted { fence, kind, lease_expiry_ms, retry_at_ms } => {
            V::LeaseGranted { fence: self::fence(fence), kind: self::kind(kind), lease_expiry_ms, retry_at_ms }
        }
        E::LeaseRenewed { fence, lease_expiry_ms } => V::LeaseRenewed { fence: self::fence(fence), lease_expiry_ms },
        E::LeaseReleased { fence, cause } => V::LeaseReleased { fence: self::fence(fence), cause: self::cause(cause) },
        E::WriteApplied { fence, write, retries, retry_at_ms, terminal } => {
            V::WriteApplied { fence: self::fence(fence), write: self::write(write), retries, retry_at_ms, terminal }
        }
        E::WriteRejected { fence, write, reason } => {
            V::WriteRejected { fence: self::fence(fence), write: self::write(write), reason: self::rejection(reason) }
        }
        E::LeaseChecked { fence, valid } => V::LeaseChecked { fence: self::fence(fence), valid },
        E::HeartbeatApplied { owner } => V::HeartbeatApplied { owner: self::owner(owner) },
        E::RepairDecision { group, needed, reclaimed } => V::RepairDecision { group, needed, reclaimed },
        E::IndexMaterialized { index, task } => V::IndexMaterialized { index, task },
        E::StageDone { stage, task } => V::StageDone { stage: self::stage(stage), task },
        E::QueryAnswered { index, materialized, waited_ms } => V::QueryAnswered { index, materialized, waited_ms },
        E::MaintenanceApplied { owner, kind } => {
            V::MaintenanceApplied { owner: self::owner(owner), kind: self::maintenance(kind) }
        }
        E::PipelineSnapshotTaken { by, due } => {
            V::PipelineSnapshotTaken { by: self::owner(by), due: due.into_iter().map(self::stage).collect() }
        }
        E::ProcessStarted { owner, concurrency } => V::ProcessStarted { owner: self::owner(owner), concurrency },
        E::PermitAcquired { owner, task, attempt } => V::PermitAcquired { owner: self::owner(owner), task, attempt },
        E::PermitReleased { owner, task, attempt } => V::PermitReleased { owner: self::owner(owner), task, attempt },
        E::ExecutionStarted { fence } => V::ExecutionStarted { fence: self::fence(fence) },
        E::AttemptDropped { fence } => V::AttemptDropped { fence: self::fence(fence) },
        E::ExecutionFinished { fence, error } => {
            V::ExecutionFinished { fence: self::fence(fence), error: error.map(self::task_error) }
        }
        E::FinalizeTimedOut { fence } => V::FinalizeTimedOut { fence: self::fence(fence) },
        E::CallbackPublished { fence } => V::CallbackPublished { fence: self::fence(fence) },
        E::HeartbeatSent { owner } => V::HeartbeatSent { owner: self::owner(owner) },
        E::MaintenanceStarted { owner, kind, pass } => {
            V::MaintenanceStarted { owner: self::owner(owner), kind: self::maintenance(kind), pass }
        }
        E::MaintenanceEnded { owner, kind, pass } => {
            V::MaintenanceEnded { owner: self::owner(owner), kind: self::maintenance(kind), pass }
        }
        E::MaintenanceStillRunning { owner, kind, pass, age_ms } => {
            V::MaintenanceStillRunning { owner: self::owner(owner), kind: self::maintenance(kind), pass, age_ms }
        }
        E::RetryPlanned { owner, task, retries, wake_at_ms } => {
            V::RetryPlanned { owner: self::owner(owner), task, retries, wake_at_ms }
        }
        E::NoteSent { owner, task, retry_at_ms } => V::NoteSent { owner: self::owner(owner), task, retry_at_ms },
        E::QueryResult { index, materialized } => V::QueryResult { index, materialized },
    }
}

/// What the built-in engine promises, from its configuration's documented
/// meaning (`EngineConfig`'s field docs): plain values, no engine helper.
pub fn promises(cfg: &config::EngineConfig) -> leasesim_vocab::promise::Promises {
    let t = &cfg.lease_ttl;
    leasesim_vocab::promise::Promises {
        concurrency: cfg.concurrency,
        claim_batch_max: cfg.claim_batch_max,
        idle_poll_ms: cfg.idle_poll_ms,
        long_poll_ms: cfg.long_poll_ms,
        lease_ttl: leasesim_vocab::promise::LeaseTerms {
            index_build_ms: t.index_build_ms,
            authz_materialization_ms: t.authz_materialization_ms,
            job_ms: t.job_ms,
            stage_ms: t.stage_ms,
            workflow_task_ms: t.workflow_task_ms,
            activity_ms: t.activity_ms,
        },
        renew_divisor: cfg.renew_divisor,
        heartbeat_interval_ms: cfg.heartbeat_interval_ms,
        dead_after_ms: cfg.dead_after_ms,
        cleanup_interval_ms: cfg.cleanup_interval_ms,
        backoff: leasesim_vocab::promise::Backoff::Doubling { base_ms: cfg.retry_base_ms, cap_ms: cfg.retry_cap_ms },
        max_retries: cfg.max_retries,
        finalize_deadline_ms: cfg.finalize_deadline_ms,
        rpc_timeout_ms: cfg.rpc_timeout_ms,
        maintenance: cfg.maintenance.iter().copied().map(maintenance).collect(),
        maintenance_interval_ms: cfg.maintenance_interval_ms,
        txn_timeout_ms: cfg.txn_timeout_ms,
        // Released tasks are due again at once.
        // store/mod.rs, `release`: dead owners' and expired leases' tasks.
        recovery_delay_ms: cfg.recovery_delay_ms,
        claim_order: leasesim_vocab::promise::ClaimOrder::DueThenId,
        statement_time: leasesim_vocab::promise::StatementTime::Commit,
        // src/client.rs: an enqueue is sent again, with its key, after no
        // answer or a conflict; anything else is final.
        enqueue_retry: Some(leasesim_vocab::promise::EnqueueRetry {
            sends: leasesim::client::ENQUEUE_SENDS,
            send_timeout_ms: cfg.rpc_timeout_ms,
            retry_on: vec![
                leasesim_vocab::op::Refusal::Conflict,
                leasesim_vocab::op::Refusal::TimedOut,
                leasesim_vocab::op::Refusal::LockTimeout,
            ],
        }),
        // Every outcome write is sent again while it is refused as
        // retryable, within the finalization deadline (worker/attempt.rs).
        outcome_retry: true,
        // The store remembers which attempt completed a task and answers
        // that attempt's retry as applied (store/mod.rs).
        outcome_idempotent: true,
        // The claim loop takes the first free permit and then every other
        // free one up to the batch size, and claims that many
        // (worker/claim_loop.rs).
        claim_fills_free_permits: true,
        cadences: cadences(cfg),
        // `Store::observe_incarnation` runs for a claim or a heartbeat only,
        // and aborts the older incarnations' transactions (store/txn.rs,
        // `abort_txns_before`).
        replaced_txns_end: leasesim_vocab::promise::ReplacedTxnsEnd::ClaimOrHeartbeat,
        // Its deadline is set when the transaction opens (store/txn.rs).
        txn_timeout_from: leasesim_vocab::promise::TxnTimeoutFrom::Open,
        heartbeat_calls: 1,
        releases_by_process: false,
        // worker/stop.rs.
        stop_grace_ms: cfg.stop_grace_ms,
    }
}

/// The periodic passes of worker/background.rs and worker/maintenance.rs.
fn cadences(cfg: &config::EngineConfig) -> Vec<leasesim_vocab::promise::Cadence> {
    use leasesim_vocab::promise::{Cadence, PassKind};
    // Both hops of a round trip, and the scheduler's turns around them.
    const HOPS_MS: u64 = 1_000;
    // A background tick sleeps its period after its calls: a reclaim tick
    // also waits for its orphan release (one call, at most an RPC deadline).
    let tick = |pass, interval_ms, late_ms| Cadence { pass, interval_ms, backoff_cap_ms: interval_ms, late_ms };
    let mut out = vec![
        tick(PassKind::ReleaseDead, cfg.cleanup_interval_ms, HOPS_MS),
        tick(PassKind::ReclaimExpired, cfg.recovery_interval_ms, cfg.rpc_timeout_ms + HOPS_MS),
        tick(PassKind::Repair, cfg.repair_interval_ms, HOPS_MS),
    ];
    // A maintenance pass starts at the claim loop's first poll once it is
    // due, and its end is seen at a poll too: one round is a wait for a
    // permit (an idle poll), a claim (long poll + RPC deadline) and an
    // idle sleep. A failure backs the kind off `interval * 2^(k-1)`, capped
    // (config.rs, `maintenance_backoff_ms`).
    let round_ms = 2 * cfg.idle_poll_ms + cfg.long_poll_ms + cfg.rpc_timeout_ms;
    for kind in &cfg.maintenance {
        out.push(Cadence {
            pass: PassKind::Maintain(maintenance(*kind)),
            interval_ms: cfg.maintenance_interval_ms,
            backoff_cap_ms: cfg.maintenance_backoff_cap_ms,
            late_ms: round_ms + HOPS_MS,
        });
    }
    out
}
