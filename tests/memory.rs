//! A campaign's memory does not grow with its length: every world is freed
//! when its run ends, and the process's resident size stays flat over many
//! seeds. (Before this test existed, a reference cycle through the madsim
//! runtime kept every seed's whole world alive: ~140 KB per seed, 450 MB
//! after 5,000 seeds.)
//!
//! Its own test binary: the world count and the resident size are per
//! process, and no other test may run beside it.

mod common;

use common::{scenarios, spec};
use leasesim_sim::{mem, runner, world};

#[test]
fn runs_leave_nothing_behind_and_memory_stays_flat() {
    // Every scenario, faults drawn (store crashes, kills, held requests ...):
    // once a run returns, its world is gone.
    for name in &scenarios() {
        for seed in 1..=3 {
            runner::run_seed(&spec(name, seed), runner::DEFAULT_WATCHDOG).expect("the seed runs");
            assert_eq!(world::live_worlds(), 0, "{name} seed {seed}: its world outlived the run");
        }
    }
    let Some(_) = mem::rss_bytes() else {
        eprintln!("memory: SKIPPED the resident-size half: no /proc/self/status on this system");
        return;
    };
    // Warm up (allocator arenas, lazy statics), then many more seeds.
    let run = |seeds: std::ops::RangeInclusive<u64>| {
        for seed in seeds {
            runner::run_seed(&spec("swarm", seed), runner::DEFAULT_WATCHDOG).expect("the seed runs");
        }
        mem::rss_bytes().expect("rss")
    };
    let warm = run(1..=30);
    let after = run(31..=180);
    let grown_mib = mem::mib(after.saturating_sub(warm));
    // A world leaked per seed would add ~20 MiB here; allocator noise is a
    // few MiB.
    assert!(grown_mib < 12.0, "resident size grew {grown_mib:.1} MiB over 150 seeds (from {:.1} MiB)", mem::mib(warm));
}
