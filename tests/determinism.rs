//! Same seed, same run, bit for bit: in one process, across processes, and
//! under madsim's own draw-by-draw determinism check.

mod common;

use common::{hash_of, scenarios, spec};
use std::process::Command;

#[test]
fn same_seed_same_hash_in_process() {
    for name in &scenarios() {
        for seed in [1, 7, 42] {
            assert_eq!(hash_of(name, seed), hash_of(name, seed), "{name} seed {seed} diverged in one process");
        }
    }
}

#[test]
fn same_seed_same_hash_across_processes() {
    let run = |name: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_leasesim"))
            .args(["run", "--scenario", name, "--seed", "7", "--json"])
            .output()
            .expect("run the leasesim binary");
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints one JSON object");
        json["trace_hash"].as_str().expect("trace_hash is a string").to_string()
    };
    for name in &scenarios() {
        let first = run(name);
        assert_eq!(first, run(name), "{name}: two processes disagree");
        assert_eq!(first, hash_of(name, 7), "{name}: the binary and the library disagree");
    }
}

#[test]
fn madsim_determinism_check_passes() {
    for name in &scenarios() {
        for seed in 1..=3 {
            let hash = leasesim_sim::runner::check_determinism(&spec(name, seed));
            assert_eq!(format!("{hash:016x}"), hash_of(name, seed), "{name} seed {seed}");
        }
    }
}

#[test]
fn different_seeds_give_different_hashes() {
    for name in &scenarios() {
        let hashes: std::collections::BTreeSet<String> = (1..=10).map(|seed| hash_of(name, seed)).collect();
        assert_eq!(hashes.len(), 10, "{name}: seeds 1..=10 collide");
    }
}

#[test]
fn a_campaign_has_one_trace_digest_whatever_its_jobs() {
    use leasesim_sim::Simulation;
    let digest = |seeds: std::ops::RangeInclusive<u64>, jobs: usize| {
        let report = Simulation::scenario("swarm").seeds(seeds).jobs(jobs).run();
        assert!(report.passed(), "{:?}", report.summary.failures);
        report.summary.trace_digest
    };
    let one_job = digest(1..=6, 1);
    assert_eq!(one_job.len(), 16, "a digest is 16 hex digits: {one_job}");
    assert_eq!(one_job, digest(1..=6, 2), "the digest depends on the number of jobs");
    assert_ne!(one_job, digest(2..=7, 1), "different runs, same digest");
}
