//! The engine's promises, re-derived from the scenario's plain values.
//!
//! The checkers never call the engine's own helpers (`retry_backoff_ms`,
//! `LeaseTtls::for_kind`, ...): a bug there would then agree with itself.
//! Each promise is written here once, from the configuration's documented
//! meaning, and every checker reads it from here.

use leasesim::config::EngineConfig;
use leasesim::task::TaskKind;

/// The lease TTL a grant or renewal of this kind promises (`None`: the task
/// is owned by heartbeat, not by a lease).
pub fn lease_ttl_ms(cfg: &EngineConfig, kind: TaskKind) -> Option<u64> {
    let t = &cfg.lease_ttl;
    match kind {
        TaskKind::IndexBuild => t.index_build_ms,
        TaskKind::AuthzMaterialization => t.authz_materialization_ms,
        TaskKind::Job => t.job_ms,
        TaskKind::Stage => t.stage_ms,
        TaskKind::WorkflowTask => t.workflow_task_ms,
        TaskKind::Activity => t.activity_ms,
    }
}

/// How long before its expiry a lease is renewed: TTL / renew_divisor.
pub fn renew_margin_ms(cfg: &EngineConfig, kind: TaskKind) -> Option<u64> {
    lease_ttl_ms(cfg, kind).map(|ttl| ttl / cfg.renew_divisor.max(1))
}

/// The backoff after the `retries`-th failure: base * 2^(retries-1), capped.
pub fn backoff_ms(cfg: &EngineConfig, retries: u32) -> u64 {
    let doublings = retries.saturating_sub(1).min(40);
    let mut ms = cfg.retry_base_ms;
    for _ in 0..doublings {
        ms = ms.saturating_mul(2);
        if ms >= cfg.retry_cap_ms {
            break;
        }
    }
    ms.min(cfg.retry_cap_ms)
}

/// Does a failure that brings a task to `retries` failures (with a fatal
/// error or not) make it dead?
pub fn dies(cfg: &EngineConfig, retries: u32, fatal: bool) -> bool {
    fatal || retries > cfg.max_retries
}

/// A claim answer older than this was dropped by its caller, so same-owner
/// recovery may release a task granted that long ago and not running.
pub fn orphan_age_ms(cfg: &EngineConfig) -> u64 {
    cfg.long_poll_ms + cfg.rpc_timeout_ms
}

/// The longest gap between two heartbeats a live, connected worker sends:
/// one interval after the previous call returned, which takes at most one
/// RPC deadline.
pub fn heartbeat_gap_ms(cfg: &EngineConfig) -> u64 {
    cfg.heartbeat_interval_ms + cfg.rpc_timeout_ms
}

/// The longest a message takes between a process and the store seam, with
/// room to spare (madsim's network: 1-10 ms). Checkers that compare a time
/// at the store with a time at a process allow this much.
pub const NET_LATENCY_MAX_MS: u64 = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        let cfg = EngineConfig { retry_base_ms: 5_000, retry_cap_ms: 60_000, ..EngineConfig::default() };
        let got: Vec<u64> = (1..=6).map(|n| backoff_ms(&cfg, n)).collect();
        assert_eq!(got, vec![5_000, 10_000, 20_000, 40_000, 60_000, 60_000]);
        assert_eq!(backoff_ms(&cfg, 0), 5_000);
        assert_eq!(backoff_ms(&cfg, u32::MAX), 60_000);
    }

    #[test]
    fn a_task_dies_past_its_retry_budget_or_on_a_fatal_error() {
        let cfg = EngineConfig { max_retries: 2, ..EngineConfig::default() };
        assert!(!dies(&cfg, 2, false));
        assert!(dies(&cfg, 3, false));
        assert!(dies(&cfg, 1, true));
    }
}
