//! What each recognized statement does, as graphile's SQL (migration m000022
//! and the builders' texts) does it in PostgreSQL.

mod add;
mod claim;
mod manage;
mod release;
mod workers;

use graphile_worker_database::{DbCell, DbError, DbValue};
use serde_json::Value;

use crate::catalog::Stmt;
use crate::params::Params;
use crate::rows::{JobRow, MigrationRow, Row};
use crate::store::{Ctx, Table, TableLock};
use crate::{Fail, Output};

pub(crate) fn run(
    stmt: Stmt,
    ctx: &mut Ctx,
    values: &[DbValue],
    server_version: &str,
    migrations: &[MigrationRow],
) -> Result<Output, Fail> {
    match stmt {
        Stmt::ServerVersion => {
            Params::new(values, 0)?;
            Ok(Output::Rows(vec![Row::new(vec![("server_version_num", DbCell::Text(server_version.into()))])]))
        }
        Stmt::LastMigration => {
            Params::new(values, 0)?;
            Ok(last_migration(server_version, migrations))
        }
        Stmt::RegisterTasks => manage::register_tasks(ctx, &Params::new(values, 1)?),
        Stmt::SelectTasks => manage::select_tasks(ctx, &Params::new(values, 1)?),
        Stmt::GetJob(shape) => claim::get_job(ctx, shape, values),
        Stmt::BatchGetJobs(shape) => claim::batch_get_jobs(ctx, shape, values),
        Stmt::CompleteJob { queued } => release::complete_job(ctx, queued, values),
        Stmt::FailJob { queued } => release::fail_job(ctx, queued, &Params::new(values, 4)?),
        Stmt::FailJobs { queued } => release::fail_jobs(ctx, queued, &Params::new(values, 3)?),
        Stmt::ReturnJobs => release::return_jobs(ctx, &Params::new(values, 2)?, false),
        Stmt::ReturnJobForRecovery => release::return_jobs(ctx, &Params::new(values, 4)?, true),
        Stmt::AddJob => add::add_job(ctx, &Params::new(values, 9)?),
        Stmt::AddJobs => add::add_jobs_statement(ctx, &Params::new(values, 2)?),
        Stmt::WorkerHeartbeat => workers::heartbeat(ctx, &Params::new(values, 2)?),
        Stmt::WorkerDeregister => workers::deregister(ctx, &Params::new(values, 1)?),
        Stmt::TrySweepLock => workers::try_sweep_lock(ctx, &Params::new(values, 2)?),
        Stmt::ListStaleWorkers => workers::list_stale(ctx, &Params::new(values, 1)?),
        Stmt::ListOrphanLockedWorkers => workers::list_orphans(ctx, &Params::new(values, 1)?),
        Stmt::HoldsResilientLocks => workers::holds_resilient_locks(ctx, &Params::new(values, 2)?),
        Stmt::WorkerLastHeartbeat => workers::last_heartbeat(ctx, &Params::new(values, 1)?),
        Stmt::RecoverDeadWorkerJobs => workers::recover_dead_worker_jobs(ctx, &Params::new(values, 2)?),
        Stmt::DeleteStaleWorkers => workers::delete_stale(ctx, &Params::new(values, 1)?),
        Stmt::LockedJobsForRecovery => workers::locked_jobs(ctx, &Params::new(values, 1)?),
        Stmt::ListActiveWorkers => {
            Params::new(values, 0)?;
            Ok(workers::list_active(ctx))
        }
        Stmt::RemoveJob => manage::remove_job(ctx, &Params::new(values, 1)?),
        Stmt::CompleteJobs => manage::complete_jobs(ctx, &Params::new(values, 1)?),
        Stmt::PermanentlyFailJobs => manage::permanently_fail_jobs(ctx, &Params::new(values, 2)?),
        Stmt::RescheduleJobs => manage::reschedule_jobs(ctx, &Params::new(values, 5)?),
        Stmt::ForceUnlockWorkers => manage::force_unlock_workers(ctx, &Params::new(values, 1)?),
        Stmt::CleanupPermanentlyFailed => {
            Params::new(values, 0)?;
            manage::delete_permanently_failed(ctx)
        }
        Stmt::CleanupJobQueues => {
            Params::new(values, 0)?;
            manage::gc_job_queues(ctx)
        }
        Stmt::CleanupTasks => manage::gc_tasks(ctx, &Params::new(values, 1)?),
        Stmt::SetIsolationReadCommitted | Stmt::SetLocalLockTimeout => {
            Params::new(values, 0)?;
            Ok(Output::Affected(0))
        }
        Stmt::LockQueuesTable => lock_table(ctx, Table::Queues, values),
        Stmt::LockTasksTable => lock_table(ctx, Table::Tasks, values),
    }
}

fn last_migration(server_version: &str, migrations: &[MigrationRow]) -> Output {
    let last = migrations.iter().map(|m| m.id).max();
    let breaking = migrations.iter().filter(|m| m.breaking).map(|m| m.id).max();
    Output::Rows(vec![Row::new(vec![
        ("server_version_num", DbCell::Text(server_version.into())),
        ("id", last.map_or(DbCell::Null, DbCell::I32)),
        ("biggest_breaking_id", breaking.map_or(DbCell::Null, DbCell::I32)),
    ])])
}

fn lock_table(ctx: &mut Ctx, table: Table, values: &[DbValue]) -> Result<Output, Fail> {
    Params::new(values, 0)?;
    if !ctx.explicit {
        return Err(error("25P01", "LOCK TABLE can only be used in transaction blocks"));
    }
    ctx.lock_table(table, TableLock::ShareRowExclusive)?;
    Ok(Output::Affected(0))
}

pub(crate) fn error(code: &str, message: &str) -> Fail {
    Fail::Error(DbError::with_code(message, code))
}

/// `returning *` of `_private_jobs` rows (or `select *` of the row type).
pub(crate) fn job_rows(jobs: &[JobRow]) -> Output {
    Output::Rows(jobs.iter().map(|job| Row::new(job.cells())).collect())
}

/// `SELECT f(..)` / `SELECT * FROM f(..)` of a function returning `void`.
pub(crate) fn void() -> Result<Output, Fail> {
    Ok(Output::Affected(1))
}

/// `value = param` where either may be NULL (NULL never matches).
pub(crate) fn eq_some<T: PartialEq + ?Sized>(value: Option<&T>, param: Option<&T>) -> bool {
    matches!((value, param), (Some(v), Some(p)) if v == p)
}

/// `value = any(array)`; a NULL array matches nothing.
pub(crate) fn any_of<T: PartialEq>(value: Option<&T>, array: Option<&[T]>) -> bool {
    match (value, array) {
        (Some(v), Some(arr)) => arr.contains(v),
        _ => false,
    }
}

/// The keys `?|` tests a jsonb value for: an object's keys, an array's
/// string elements, a string scalar itself.
fn jsonb_keys(value: &Value) -> Vec<&str> {
    match value {
        Value::Object(map) => map.keys().map(String::as_str).collect(),
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        Value::String(s) => vec![s.as_str()],
        _ => Vec::new(),
    }
}

/// `flags ?| array`: `None` is SQL NULL (a NULL operand gives NULL).
pub(crate) fn has_any_key(flags: Option<&Value>, array: Option<&[String]>) -> Option<bool> {
    let (flags, array) = (flags?, array?);
    let keys = jsonb_keys(flags);
    Some(array.iter().any(|wanted| keys.contains(&wanted.as_str())))
}

/// `(select jsonb_object_agg(flag, true) from unnest(flags) as item(flag))`.
pub(crate) fn flags_object(flags: Option<&[String]>) -> Option<Value> {
    let flags = flags.filter(|f| !f.is_empty())?;
    let map: serde_json::Map<String, Value> = flags.iter().map(|f| (f.clone(), Value::Bool(true))).collect();
    Some(Value::Object(map))
}

/// An int parameter cast `::smallint`.
pub(crate) fn smallint(value: Option<i32>) -> Result<Option<i16>, Fail> {
    value.map(|v| i16::try_from(v).map_err(|_| error("22003", "smallint out of range"))).transpose()
}

/// The CHECK constraints of `_private_jobs`, in PostgreSQL's order (by name).
pub(crate) fn check_job(job: &JobRow) -> Result<(), Fail> {
    if let Some(key) = &job.key {
        let len = key.chars().count();
        if len == 0 || len > 512 {
            return Err(error(
                "23514",
                "new row for relation \"_private_jobs\" violates check constraint \"jobs_key_check\"",
            ));
        }
    }
    if job.max_attempts < 1 {
        return Err(error(
            "23514",
            "new row for relation \"_private_jobs\" violates check constraint \"jobs_max_attempts_check\"",
        ));
    }
    Ok(())
}

/// `locked_at is null or locked_at < now() - interval '4 hours'`: what
/// graphile's utility functions treat as not (or no longer) locked.
pub(crate) fn unlocked_or_expired(job: &JobRow, now: crate::Ts) -> bool {
    job.locked_at.is_none_or(|at| at < crate::time::plus_micros(now, -crate::time::FOUR_HOURS_MICROS))
}
