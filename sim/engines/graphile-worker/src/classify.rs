//! graphile's statements in the harness's words.
//!
//! Each statement the model recognizes (by graphile's own text, see the
//! model's catalog) is one kind of request: a claim (`get_job`), an outcome
//! (`complete_job`, `fail_job`), a heartbeat, a recovery release of other
//! workers' jobs (`recover_dead_worker_jobs`), an enqueue (`add_job`), a
//! worker handing back its own jobs (`_private_return_jobs`), or something
//! the harness has no concept for (a read, setup, bookkeeping), which must
//! then change no job row. The attempt an outcome speaks for is the latest
//! grant of that job to its sender ([`Book::fence_of`]): graphile's
//! statements name the job and, at most, the worker, never the grant.

use crate::book::Book;
use crate::driver::{Answer, Statement};
use crate::seam::{micros, queue_id, refusal_of, GraphileStore};
use graphile_worker_database::{DbCell, DbValue};
use leasesim_graphile_model::{Output, Stmt};
use leasesim_vocab::ids::{Fence, Owner, TaskId};
use leasesim_vocab::op::{Grant, Op, Response};
use leasesim_vocab::task::{TaskError, TaskKind, TaskSpec};
use leasesim_vocab::truth::Sender;

/// The request, classified.
pub fn op(book: &Book, from: Sender, req: &Statement, stmt: Option<Stmt>) -> Op {
    match req {
        Statement::Commit { txn } => Op::Commit { txn: *txn },
        Statement::Rollback { txn } => Op::Rollback { txn: *txn },
        Statement::Run { txn, params, .. } => {
            let op = statement(book, from, stmt, params.values());
            match txn {
                Some(txn) => Op::Exec { txn: *txn, stmt: Box::new(op), commit: false },
                None => op,
            }
        }
    }
}

/// One statement (outside its transaction), classified.
fn statement(book: &Book, from: Sender, stmt: Option<Stmt>, params: &[DbValue]) -> Op {
    let by = from.owner();
    let other = |what: &str| Op::Other { what: what.to_string(), by };
    let Some(stmt) = stmt else { return other("unknown statement") };
    let Some(owner) = by else {
        return match stmt {
            Stmt::AddJob | Stmt::AddJobs => enqueue(params),
            _ => other(stmt_name(stmt)),
        };
    };
    let fence = |book: &Book| job_param(params, 0).map(|task| book.fence_of(task, owner));
    match stmt {
        Stmt::GetJob(_) => Op::Claim { owner, max: 1, wait_ms: 0 },
        Stmt::BatchGetJobs(_) => Op::Claim { owner, max: int_param(params, 2).unwrap_or(1), wait_ms: 0 },
        Stmt::CompleteJob { .. } => fence(book).map_or_else(|| other("complete_job"), |fence| Op::Complete { fence }),
        Stmt::FailJob { .. } => match fence(book) {
            Some(fence) => Op::Fail { fence, error: error_param(params, 1) },
            None => other("fail_job"),
        },
        Stmt::WorkerHeartbeat => Op::Heartbeat { owner },
        Stmt::WorkerDeregister => Op::Deregister { owner },
        Stmt::RecoverDeadWorkerJobs => {
            let owners: Vec<Owner> = text_array(params, 0).iter().filter_map(|id| book.owner_of(id)).collect();
            Op::ReleaseOwners { by: owner, owners }
        }
        // `_private_return_jobs($1 worker, $2 ids)`, or one job `array[$2]`.
        Stmt::ReturnJobs => {
            let tasks = int_array(params, 1).into_iter().map(|id| id as TaskId).collect();
            Op::ReturnOwn { owner, tasks, interrupted: false }
        }
        // A running job given back at shutdown, delayed by `recovery_delay`.
        Stmt::ReturnJobForRecovery => {
            Op::ReturnOwn { owner, tasks: job_param(params, 1).into_iter().collect(), interrupted: true }
        }
        Stmt::AddJob | Stmt::AddJobs => enqueue(params),
        _ => other(stmt_name(stmt)),
    }
}

/// `add_job(identifier, payload, queue_name, run_at, ...)`.
fn enqueue(params: &[DbValue]) -> Op {
    let queue = match params.get(2) {
        Some(DbValue::TextOpt(Some(name)) | DbValue::Text(name)) => Some(queue_id(name)),
        _ => None,
    };
    let spec = TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: 0, queue };
    Op::Enqueue { spec, key: None }
}

/// The statement kind's name, for `Op::Other`.
fn stmt_name(stmt: Stmt) -> &'static str {
    match stmt {
        Stmt::ServerVersion => "server-version",
        Stmt::LastMigration => "last-migration",
        Stmt::RegisterTasks | Stmt::SelectTasks => "task-registration",
        Stmt::WorkerDeregister => "worker-deregister",
        Stmt::TrySweepLock => "sweep-lock",
        Stmt::ListStaleWorkers | Stmt::ListOrphanLockedWorkers | Stmt::HoldsResilientLocks => "list-dead-workers",
        Stmt::WorkerLastHeartbeat | Stmt::ListActiveWorkers => "read-workers",
        Stmt::DeleteStaleWorkers => "delete-stale-workers",
        Stmt::LockedJobsForRecovery => "read-locked-jobs",
        _ => "other",
    }
}

fn job_param(params: &[DbValue], i: usize) -> Option<TaskId> {
    match params.get(i) {
        Some(DbValue::I64(id)) => Some(*id as TaskId),
        _ => None,
    }
}

fn int_param(params: &[DbValue], i: usize) -> Option<u32> {
    match params.get(i) {
        Some(DbValue::I32(n)) => Some((*n).max(0) as u32),
        Some(DbValue::I64(n)) => Some((*n).max(0) as u32),
        _ => None,
    }
}

fn text_array(params: &[DbValue], i: usize) -> Vec<String> {
    match params.get(i) {
        Some(DbValue::TextArray(ids) | DbValue::TextArrayOpt(Some(ids))) => ids.clone(),
        _ => Vec::new(),
    }
}

fn int_array(params: &[DbValue], i: usize) -> Vec<i64> {
    match params.get(i) {
        Some(DbValue::I64Array(ids)) => ids.clone(),
        Some(DbValue::I32Array(ids)) => ids.iter().map(|&id| id as i64).collect(),
        _ => Vec::new(),
    }
}

/// The failure a body reported, as its message names it (the body seam
/// writes `leasesim: conflict` or `leasesim: fatal`).
fn error_param(params: &[DbValue], i: usize) -> TaskError {
    match params.get(i) {
        Some(DbValue::Text(message)) if message.contains("fatal") => TaskError::Fatal,
        _ => TaskError::Conflict,
    }
}

/// The answer, normalized.
pub fn response(store: &GraphileStore, op: &Op, resp: &Answer) -> Response {
    let rows = match resp {
        Err(e) => return Response::Rejected { reason: refusal_of(e.code()) },
        Ok(Output::Affected(n)) => return Response::Rows { count: *n },
        Ok(Output::Rows(rows)) => rows,
    };
    match op.statement() {
        Op::Claim { .. } => Response::Claimed { grants: rows.iter().filter_map(|r| grant(store, r)).collect() },
        Op::Enqueue { .. } => match rows.first().and_then(|r| r.get("id")) {
            Some(DbCell::I64(id)) => Response::Enqueued { task: *id as TaskId },
            _ => Response::Rows { count: rows.len() as u64 },
        },
        Op::ReleaseOwners { .. } => match rows.first().and_then(|r| r.get("recovered_count")) {
            Some(DbCell::I32(n)) => Response::Released { tasks: (*n).max(0) as u32 },
            _ => Response::Rows { count: rows.len() as u64 },
        },
        _ => Response::Rows { count: rows.len() as u64 },
    }
}

/// One claimed job as a grant: its attempt number is the book's.
fn grant(store: &GraphileStore, row: &leasesim_graphile_model::Row) -> Option<Grant> {
    let (Some(DbCell::I64(id)), Some(DbCell::TimestampTz(at)), Some(DbCell::Text(by))) =
        (row.get("id"), row.get("locked_at"), row.get("locked_by"))
    else {
        return None;
    };
    let task = *id as TaskId;
    let owner = store.book.owner_of(by)?;
    let attempt = store.book.attempt(task, micros(*at))?;
    Some(Grant { fence: Fence { task, attempt, owner }, kind: TaskKind::Job, lease_expiry_ms: None })
}
