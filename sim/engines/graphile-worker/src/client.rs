//! The application's client: one call adds one job through graphile's own
//! `WorkerUtils::add_raw_job`, over a connection of the harness's driver.
//! It is not retried: graphile's utils leave retries to the application,
//! and this application makes one attempt.

use crate::body::TASK;
use crate::config::GraphileConfig;
use crate::driver::SimDatabase;
use crate::seam::{queue_name, SCHEMA};
use crate::Graphile;
use graphile_worker::{JobSpec, WorkerUtils};
use leasesim_vocab::truth::ClientAnswer;
use leasesim_world::engine::ClientWorld;
use leasesim_world::world::Action;

pub async fn call(cfg: GraphileConfig, c: ClientWorld<Graphile>, action: Action) -> ClientAnswer {
    let Action::Enqueue(spec) = action else {
        // The adapter's validation refuses workloads with pipelines or
        // index queries: graphile has neither.
        unreachable!("graphile's workload only enqueues jobs");
    };
    let db = SimDatabase::new(c.link, None, cfg.connection_timeout_ms, c.rec, c.shared);
    let utils = WorkerUtils::new(graphile_worker::Database::new(db), SCHEMA);
    let job_spec = JobSpec {
        queue_name: spec.queue.map(queue_name),
        max_attempts: Some(cfg.max_attempts as i16),
        ..JobSpec::default()
    };
    match utils.add_raw_job(TASK, serde_json::json!({}), job_spec).await {
        Ok(job) => ClientAnswer::Enqueued { task: Some(*job.id() as u64) },
        Err(error) => {
            tracing::debug!(%error, "add_job failed");
            ClientAnswer::Enqueued { task: None }
        }
    }
}
