//! graphile operations as data, each turned into the exact statements (text
//! and parameters) graphile's own builders send for it, by running the
//! builder against a [`Capture`]. For tests and scripted scenarios.

use std::time::Duration;

use chrono::DateTime;
use futures::executor::block_on;
use graphile_worker_database::{DbParams, Schema};
use graphile_worker_job::{DbJob, DbJobData, Job};
use graphile_worker_job_spec::JobSpec;
use graphile_worker_queries as q;
use graphile_worker_utils::types::{CleanupTask, RescheduleJobOptions};
use graphile_worker_utils::WorkerUtils;
use serde_json::Value;

use crate::catalog::{capture, Capture};
use crate::time::Ts;

/// A job as a worker holds it: what complete/fail/return need of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRef {
    pub id: i64,
    pub queued: bool,
}

/// A graphile `Job` with the given id and queue (nothing else is read by the
/// builders that take one).
pub fn graphile_job(job: JobRef) -> Job {
    let epoch = DateTime::UNIX_EPOCH;
    let data = DbJobData {
        id: job.id,
        job_queue_id: job.queued.then_some(1),
        payload: Value::Null,
        priority: 0,
        run_at: epoch,
        attempts: 1,
        max_attempts: 25,
        last_error: None,
        created_at: epoch,
        updated_at: epoch,
        key: None,
        revision: 0,
        locked_at: None,
        locked_by: None,
        flags: None,
        task_id: 1,
    };
    Job::from_db_job(DbJob::from_data(data), "task".to_string())
}

#[derive(Debug, Clone)]
pub enum Call {
    LastMigration,
    RegisterTasks(Vec<String>),
    GetJob {
        worker: String,
        task_ids: Vec<i32>,
        forbidden: Vec<String>,
        accepted: Vec<String>,
        allowlist: Option<Vec<String>>,
        /// `use_local_time`: the worker's clock instead of `now()`.
        local_now: Option<Ts>,
    },
    BatchGetJobs {
        worker: String,
        task_ids: Vec<i32>,
        batch_size: i32,
    },
    CompleteJob {
        job: JobRef,
        worker: String,
    },
    FailJob {
        job: JobRef,
        worker: String,
        message: String,
        replacement: Option<Value>,
    },
    FailJobs {
        jobs: Vec<JobRef>,
        worker: String,
        message: String,
    },
    AddJob {
        identifier: String,
        payload: Value,
        spec: JobSpec,
    },
    AddJobs {
        jobs: Vec<(String, Value, JobSpec)>,
        preserve_run_at: bool,
    },
    Heartbeat {
        worker: String,
        metadata: Option<Value>,
    },
    Deregister {
        worker: String,
    },
    TrySweepLock,
    ListStaleWorkers {
        threshold_ms: u64,
    },
    ListOrphanLockedWorkers {
        threshold_ms: u64,
    },
    HoldsResilientLocks {
        worker: String,
        flags: Vec<String>,
    },
    WorkerLastHeartbeat {
        worker: String,
    },
    RecoverDeadWorkerJobs {
        workers: Vec<String>,
        delay_ms: u64,
    },
    DeleteStaleWorkers {
        workers: Vec<String>,
    },
    LockedJobsForRecovery {
        workers: Vec<String>,
    },
    ListActiveWorkers,
    ReturnJobs {
        worker: String,
        jobs: Vec<JobRef>,
    },
    ReturnJobForRecovery {
        worker: String,
        job: JobRef,
        delay_ms: Option<u64>,
        error: Option<String>,
    },
    RemoveJob {
        key: String,
    },
    CompleteJobs {
        ids: Vec<i64>,
    },
    PermanentlyFailJobs {
        ids: Vec<i64>,
        reason: String,
    },
    RescheduleJobs {
        ids: Vec<i64>,
        run_at: Option<Ts>,
        priority: Option<i16>,
        attempts: Option<i16>,
        max_attempts: Option<i16>,
    },
    ForceUnlockWorkers {
        workers: Vec<String>,
    },
    CleanupPermanentlyFailed,
    /// cleanup GcJobQueues: SET, SET LOCAL, LOCK TABLE, DELETE (in a transaction).
    CleanupJobQueues,
    /// cleanup GcTaskIdentifiers: SET, SET LOCAL, LOCK TABLE, DELETE (in a transaction).
    CleanupTasks,
}

impl Call {
    /// Whether graphile sends it in a transaction of its own (BEGIN .. COMMIT around the statements).
    pub fn own_transaction(&self) -> bool {
        matches!(self, Call::CleanupJobQueues | Call::CleanupTasks)
    }

    /// The statements graphile's builder sends for it, in order (none for
    /// some calls with nothing to do, such as a recovery of no workers).
    pub fn statements(&self, schema: &str) -> Vec<(String, DbParams)> {
        let schema = Schema::new(schema);
        capture(|c| self.send(c, &schema))
    }

    fn send(&self, c: &Capture, schema: &Schema) {
        match self {
            Call::LastMigration => drop(block_on(graphile_worker_migrations::migrate(c.database(), schema))),
            Call::RegisterTasks(names) => {
                drop(block_on(q::task_identifiers::get_tasks_details(c, schema, names.clone())));
            }
            Call::GetJob { .. } | Call::BatchGetJobs { .. } => self.send_claim(c, schema),
            Call::CompleteJob { job, worker } => {
                drop(block_on(q::complete_job::complete_job(c, &graphile_job(*job), worker, schema)));
            }
            Call::FailJob { job, worker, message, replacement } => {
                let job = graphile_job(*job);
                drop(block_on(q::fail_job::single::fail_job(c, &job, schema, worker, message, replacement.clone())));
            }
            Call::FailJobs { jobs, worker, message } => {
                let jobs: Vec<Job> = jobs.iter().map(|j| graphile_job(*j)).collect();
                let failed: Vec<_> =
                    jobs.iter().map(|job| q::fail_job::batch::FailedJob { job, error: message }).collect();
                drop(block_on(q::fail_job::batch::fail_jobs(c, &failed, schema, worker)));
            }
            Call::AddJob { identifier, payload, spec } => {
                let fut = q::add_job::single::add_job(c, schema, identifier, payload.clone(), spec.clone(), false);
                drop(block_on(fut));
            }
            Call::AddJobs { jobs, preserve_run_at } => {
                let to_add: Vec<_> = jobs
                    .iter()
                    .map(|(identifier, payload, spec)| q::add_job::types::JobToAdd {
                        identifier,
                        payload: payload.clone(),
                        spec,
                    })
                    .collect();
                let details = q::task_identifiers::TaskDetails::new();
                drop(block_on(q::add_job::batch::add_jobs(c, schema, &to_add, &details, *preserve_run_at, false)));
            }
            _ => self.send_recovery(c, schema),
        }
    }

    fn send_claim(&self, c: &Capture, schema: &Schema) {
        let details = |ids: &[i32]| {
            let mut details = q::task_identifiers::TaskDetails::new();
            for id in ids {
                details.insert(*id, format!("task{id}"));
            }
            details
        };
        match self {
            Call::GetJob { worker, task_ids, forbidden, accepted, allowlist, local_now } => {
                let mut filter = q::flag_filter::JobFlagFilter::new(forbidden, accepted);
                if let Some(list) = allowlist {
                    filter = filter.with_allowlist(list.as_slice());
                }
                let details = details(task_ids);
                let fut = q::get_job::get_job_with_filter(c, &details, schema, worker, filter, *local_now);
                drop(block_on(fut));
            }
            Call::BatchGetJobs { worker, task_ids, batch_size } => {
                let details = details(task_ids);
                let fut = q::batch_get_jobs::batch_get_jobs(c, &details, schema, worker, &[], *batch_size, None);
                drop(block_on(fut));
            }
            _ => unreachable!("not a claim"),
        }
    }

    fn send_recovery(&self, c: &Capture, schema: &Schema) {
        use q::worker_heartbeat::{active, lock, registration, stale};
        let ms = |ms: u64| Duration::from_millis(ms);
        match self {
            Call::Heartbeat { worker, metadata } => {
                drop(block_on(registration::worker_heartbeat(c, schema, worker, metadata.clone())));
            }
            Call::Deregister { worker } => drop(block_on(registration::worker_deregister(c, schema, worker))),
            Call::TrySweepLock => drop(block_on(lock::try_acquire_sweep_lock(c))),
            Call::ListStaleWorkers { threshold_ms } => {
                drop(block_on(stale::list_stale_workers(c, schema, ms(*threshold_ms))))
            }
            Call::ListOrphanLockedWorkers { threshold_ms } => {
                drop(block_on(stale::list_orphan_locked_workers(c, schema, ms(*threshold_ms))));
            }
            Call::HoldsResilientLocks { worker, flags } => {
                drop(block_on(stale::worker_holds_resilient_locks(c, schema, worker, flags)));
            }
            Call::WorkerLastHeartbeat { worker } => drop(block_on(stale::get_worker_last_heartbeat(c, schema, worker))),
            Call::RecoverDeadWorkerJobs { workers, delay_ms } => {
                drop(block_on(q::recover_workers::recover_dead_worker_jobs(c, schema, workers, ms(*delay_ms))));
            }
            Call::DeleteStaleWorkers { workers } => drop(block_on(stale::delete_stale_workers(c, schema, workers))),
            Call::LockedJobsForRecovery { workers } => {
                drop(block_on(q::recover_workers::get_locked_jobs_for_recovery(c, schema, workers)));
            }
            Call::ListActiveWorkers => drop(block_on(active::list_active_workers(c, schema, ms(1000)))),
            Call::ReturnJobs { worker, jobs } => {
                let jobs: Vec<Job> = jobs.iter().map(|j| graphile_job(*j)).collect();
                drop(block_on(q::return_jobs::batch::return_jobs(c, &jobs, schema, worker)));
            }
            Call::ReturnJobForRecovery { worker, job, delay_ms, error } => {
                let job = graphile_job(*job);
                let fut = q::return_jobs::recovery::return_job_for_recovery(
                    c,
                    &job,
                    schema,
                    worker,
                    delay_ms.map(ms),
                    error.as_deref(),
                );
                drop(block_on(fut));
            }
            _ => self.send_utils(c, schema),
        }
    }

    fn send_utils(&self, c: &Capture, schema: &Schema) {
        let utils = WorkerUtils::new(c.database(), schema);
        match self {
            Call::RemoveJob { key } => drop(block_on(utils.remove_job(key))),
            Call::CompleteJobs { ids } => drop(block_on(utils.complete_jobs(ids))),
            Call::PermanentlyFailJobs { ids, reason } => drop(block_on(utils.permanently_fail_jobs(ids, reason))),
            Call::RescheduleJobs { ids, run_at, priority, attempts, max_attempts } => {
                let options = RescheduleJobOptions {
                    run_at: *run_at,
                    priority: *priority,
                    attempts: *attempts,
                    max_attempts: *max_attempts,
                };
                drop(block_on(utils.reschedule_jobs(ids, options)));
            }
            Call::ForceUnlockWorkers { workers } => {
                let ids: Vec<&str> = workers.iter().map(String::as_str).collect();
                drop(block_on(utils.force_unlock_workers(&ids)));
            }
            Call::CleanupPermanentlyFailed => {
                drop(block_on(utils.cleanup(&[CleanupTask::DeletePermanentlyFailedJobs])))
            }
            Call::CleanupJobQueues => drop(block_on(utils.cleanup(&[CleanupTask::GcJobQueues]))),
            Call::CleanupTasks => drop(block_on(utils.cleanup(&[CleanupTask::GcTaskIdentifiers]))),
            _ => unreachable!("every call is sent by one of the send functions: {self:?}"),
        }
    }
}
