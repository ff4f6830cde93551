//! Task registration and WorkerUtils' job management and cleanup.

use std::collections::BTreeSet;

use graphile_worker_database::DbCell;

use super::add::{ensure_task, task_id};
use super::{any_of, check_job, eq_some, job_rows, smallint, unlocked_or_expired, void};
use crate::params::Params;
use crate::rows::{JobRow, Row};
use crate::store::{Ctx, RowKey, Table, TableLock};
use crate::{Fail, Output};

/// get_tasks_details' insert: the distinct identifiers not yet registered
/// (in sorted order: the order in which they draw ids, see DESIGN.md).
pub(crate) fn register_tasks(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let names: BTreeSet<String> = p.text_array_opt(0)?.unwrap_or_default().into_iter().collect();
    ctx.lock_table_at_parse(Table::Tasks, TableLock::RowExclusive)?;
    let mut inserted = 0;
    for name in names {
        if task_id(ctx, &name).is_none() {
            ensure_task(ctx, Some(&name))?;
            inserted += 1;
        }
    }
    Ok(Output::Affected(inserted))
}

pub(crate) fn select_tasks(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let names = p.text_array_opt(0)?;
    let rows = ctx
        .all_tasks()
        .into_iter()
        .filter(|t| any_of(Some(&t.identifier), names.as_deref()))
        .map(|t| Row::new(vec![("id", DbCell::I32(t.id)), ("identifier", DbCell::Text(t.identifier))]))
        .collect();
    Ok(Output::Rows(rows))
}

/// Jobs with one of the ids: in heap order (a scan without ORDER BY), or in
/// id order (`PERFORM .. ORDER BY jobs.id FOR UPDATE`).
fn by_ids(ctx: &Ctx, ids: &[i64], heap_order: bool, also: impl Fn(&JobRow) -> bool) -> Vec<JobRow> {
    let jobs = if heap_order { ctx.jobs_in_heap_order() } else { ctx.visible_jobs() };
    jobs.into_iter().filter(|j| ids.contains(&j.id) && also(j)).cloned().collect()
}

/// `remove_job(job_key)`: deletes the job unless it is locked; a locked one
/// loses its key, runs out of attempts and is retired.
pub(crate) fn remove_job(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    // STRICT: a NULL key returns NULL without running.
    let Some(key) = p.text_opt(0)? else { return void() };
    ctx.lock_table(Table::Jobs, TableLock::RowExclusive)?;
    let now = ctx.now;
    let with_key = |ctx: &Ctx| ctx.all_jobs().into_iter().find(|j| j.key.as_deref() == Some(key.as_str()));
    if ctx.resume_step == 0 {
        if let Some(job) = with_key(ctx).filter(|j| unlocked_or_expired(j, now)) {
            ctx.lock(RowKey::Job(job.id))?;
            ctx.delete_job(job.id)?;
            return void();
        }
    }
    // The DELETE found nothing: a try that waits from here on resumes here,
    // as PostgreSQL resumes the function at its UPDATE (with that snapshot's answer).
    ctx.step = 1;
    if let Some(job) = with_key(ctx) {
        ctx.lock(RowKey::Job(job.id))?;
        let row = JobRow { key: None, attempts: job.max_attempts, updated_at: now, ..job };
        ctx.put_job(row.clone());
        ctx.lock_table(Table::Retirements, TableLock::RowExclusive)?;
        ctx.retire(row.id)?;
    }
    void()
}

pub(crate) fn complete_jobs(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let ids = p.i64_array(0)?;
    ctx.lock_table(Table::Jobs, TableLock::RowExclusive)?;
    let now = ctx.now;
    let jobs = by_ids(ctx, &ids, true, |j| unlocked_or_expired(j, now));
    for job in &jobs {
        ctx.lock(RowKey::Job(job.id))?;
        ctx.delete_job(job.id)?;
    }
    Ok(job_rows(&jobs))
}

pub(crate) fn permanently_fail_jobs(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let ids = p.i64_array(0)?;
    let reason = p.text_opt(1)?.unwrap_or_else(|| "Manually marked as failed".into());
    ctx.lock_table(Table::Jobs, TableLock::RowExclusive)?;
    ctx.lock_table(Table::Retirements, TableLock::RowExclusive)?;
    let now = ctx.now;
    let mut failed = Vec::new();
    for job in by_ids(ctx, &ids, true, |j| unlocked_or_expired(j, now)) {
        ctx.lock(RowKey::Job(job.id))?;
        let row = JobRow { last_error: Some(reason.clone()), attempts: job.max_attempts, updated_at: now, ..job };
        ctx.put_job(row.clone());
        failed.push(row);
    }
    for job in &failed {
        ctx.retire(job.id)?;
    }
    Ok(job_rows(&failed))
}

/// `reschedule_jobs(ids, run_at, priority, attempts, max_attempts)`: locks
/// first, then updates in a fresh snapshot and clears retirement markers.
pub(crate) fn reschedule_jobs(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let ids = p.i64_array(0)?;
    let run_at = p.ts_opt(1)?;
    let (priority, attempts, max_attempts) = (p.i32_opt(2)?, p.i32_opt(3)?, p.i32_opt(4)?);
    let now = ctx.now;
    for job in by_ids(ctx, &ids, false, |j| unlocked_or_expired(j, now)) {
        ctx.lock(RowKey::Job(job.id))?;
    }
    ctx.lock_table(Table::Jobs, TableLock::RowExclusive)?;
    ctx.lock_table(Table::Retirements, TableLock::RowExclusive)?;
    let mut updated = Vec::new();
    for job in by_ids(ctx, &ids, false, |j| unlocked_or_expired(j, now)) {
        let row = JobRow {
            run_at: run_at.unwrap_or(job.run_at),
            priority: smallint(priority)?.unwrap_or(job.priority),
            attempts: smallint(attempts)?.unwrap_or(job.attempts),
            max_attempts: smallint(max_attempts)?.unwrap_or(job.max_attempts),
            updated_at: now,
            ..job
        };
        check_job(&row)?;
        ctx.put_job(row.clone());
        updated.push(row);
    }
    for job in &updated {
        ctx.unretire(job.id)?;
    }
    Ok(job_rows(&updated))
}

pub(crate) fn force_unlock_workers(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let ids = p.text_array_opt(0)?;
    ctx.lock_table(Table::Jobs, TableLock::RowExclusive)?;
    let jobs: Vec<JobRow> = ctx
        .jobs_in_heap_order()
        .into_iter()
        .filter(|j| any_of(j.locked_by.as_ref(), ids.as_deref()))
        .cloned()
        .collect();
    for job in jobs {
        ctx.lock(RowKey::Job(job.id))?;
        ctx.put_job(JobRow { locked_at: None, locked_by: None, ..job });
    }
    ctx.lock_table(Table::Queues, TableLock::RowExclusive)?;
    super::workers::unlock_queues(ctx, ids.as_deref())?;
    void()
}

/// cleanup `DeletePermanentlyFailedJobs`: `attempts = max_attempts and locked_at is null`.
pub(crate) fn delete_permanently_failed(ctx: &mut Ctx) -> Result<Output, Fail> {
    ctx.lock_table_at_parse(Table::Jobs, TableLock::RowExclusive)?;
    let jobs: Vec<JobRow> = ctx
        .jobs_in_heap_order()
        .into_iter()
        .filter(|j| j.attempts == j.max_attempts && j.locked_at.is_none())
        .cloned()
        .collect();
    for job in &jobs {
        ctx.lock(RowKey::Job(job.id))?;
        ctx.delete_job(job.id)?;
    }
    Ok(Output::Affected(jobs.len() as u64))
}

/// cleanup `GcJobQueues`: unlocked queues no job refers to.
pub(crate) fn gc_job_queues(ctx: &mut Ctx) -> Result<Output, Fail> {
    ctx.lock_table_at_parse(Table::Queues, TableLock::RowExclusive)?;
    let used: BTreeSet<i32> = ctx.visible_jobs().into_iter().filter_map(|j| j.job_queue_id).collect();
    let unused: Vec<i32> = ctx
        .queues_in_heap_order()
        .into_iter()
        .filter(|q| q.locked_at.is_none() && !used.contains(&q.id))
        .map(|q| q.id)
        .collect();
    for id in &unused {
        ctx.lock(RowKey::Queue(*id))?;
        ctx.delete_queue(*id);
    }
    Ok(Output::Affected(unused.len() as u64))
}

/// cleanup `GcTaskIdentifiers`: tasks no job refers to, except those kept
/// (`identifier <> all($1)`: a NULL list keeps everything).
pub(crate) fn gc_tasks(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let Some(keep) = p.text_array_opt(0)? else { return Ok(Output::Affected(0)) };
    ctx.lock_table_at_parse(Table::Tasks, TableLock::RowExclusive)?;
    let used: BTreeSet<i32> = ctx.all_jobs().into_iter().map(|j| j.task_id).collect();
    let unused: Vec<i32> = ctx
        .all_tasks()
        .into_iter()
        .filter(|t| {
            !used.contains(&t.id) && !keep.iter().any(|k| eq_some(Some(k.as_str()), Some(t.identifier.as_str())))
        })
        .map(|t| t.id)
        .collect();
    for id in &unused {
        ctx.lock(RowKey::Task(*id))?;
        ctx.delete_task(*id);
    }
    Ok(Output::Affected(unused.len() as u64))
}
