//! One worker process: graphile's own `Worker`, built by its own
//! `WorkerOptions` with the harness's database driver, running the harness's
//! task body for every job, as an application's `main` runs it:
//! `WorkerOptions::init().await?` then `worker.run().await?`. When either
//! fails (graphile stops a worker on any database error of a job slot) the
//! process exits, and the world's supervisor starts a new one after
//! `restart_delay_ms`.

use crate::body::{BodySeam, LeasesimJob};
use crate::config::GraphileConfig;
use crate::driver::SimDatabase;
use crate::seam::SCHEMA;
use crate::Graphile;
use graphile_worker::{WorkerOptions, WorkerRecoveryConfig, WorkerShutdownConfig};
use leasesim_world::engine::WorkerWorld;
use std::time::Duration;

pub async fn run(cfg: GraphileConfig, w: WorkerWorld<Graphile>) {
    let db =
        SimDatabase::new(w.link.clone(), Some(w.owner), cfg.connection_timeout_ms, w.rec.clone(), w.shared.clone());
    let body = BodySeam { handler: w.body.clone(), book: w.shared.clone(), owner: w.owner };
    match options(&cfg, db, body).init().await {
        Ok(worker) => {
            w.shared.register(worker.worker_id(), w.owner);
            tracing::debug!(worker_id = worker.worker_id().as_str(), owner = %w.owner, "graphile worker started");
            match worker.run().await {
                Ok(()) => tracing::info!(owner = %w.owner, "graphile worker stopped"),
                Err(error) => tracing::info!(%error, owner = %w.owner, "graphile worker failed; the process exits"),
            }
        }
        Err(error) => tracing::info!(%error, owner = %w.owner, "graphile worker failed to start; the process exits"),
    }
}

/// The options a user would give graphile for this configuration.
fn options(cfg: &GraphileConfig, db: SimDatabase, body: BodySeam) -> WorkerOptions {
    let recovery = WorkerRecoveryConfig::default()
        .heartbeat_interval(Duration::from_millis(cfg.heartbeat_interval_ms))
        .sweep_interval(Duration::from_millis(cfg.sweep_interval_ms))
        .sweep_threshold(Duration::from_millis(cfg.sweep_threshold_ms))
        .recovery_delay(Duration::from_millis(cfg.recovery_delay_ms))
        .enabled(cfg.recovery);
    // The harness owns the process's life: no OS signal handlers.
    let shutdown = WorkerShutdownConfig::default()
        .listen_os_shutdown_signals(false)
        .grace_period(Duration::from_millis(cfg.grace_period_ms));
    let mut options = WorkerOptions::default()
        .database(graphile_worker::Database::new(db))
        .schema(SCHEMA)
        .concurrency(cfg.concurrency as usize)
        .poll_interval(Duration::from_millis(cfg.poll_interval_ms))
        // The simulated database has no LISTEN/NOTIFY: workers poll.
        .use_notification_delivery(false)
        .define_job::<LeasesimJob>()
        .add_extension(body)
        .worker_recovery(recovery)
        .worker_shutdown(shutdown);
    if let Some(ms) = cfg.complete_batch_delay_ms {
        options = options.complete_job_batch_delay(Duration::from_millis(ms));
    }
    if let Some(ms) = cfg.fail_batch_delay_ms {
        options = options.fail_job_batch_delay(Duration::from_millis(ms));
    }
    options
}
