//! With no faults, every seed ends quiet: every task terminal, no lease left,
//! no permit held, no invariant violated.

mod common;

use common::{scenarios, spec};
use leasesim_sim::runner::{self, PlanSource};

const SEEDS: u64 = 200;

#[test]
fn fault_free_seeds_end_quiet() {
    for name in &scenarios() {
        for seed in 1..=SEEDS {
            let o = runner::run_seed(&spec(name, seed).with_plan(PlanSource::None), runner::DEFAULT_WATCHDOG)
                .unwrap_or_else(|e| panic!("{name} seed {seed}: {e}"));
            let open = o.tasks["ready"] + o.tasks["leased"];
            assert_eq!(open, 0, "{name} seed {seed}: {open} tasks not terminal: {:?}\nreplay: {}", o.tasks, o.replay);
            assert!(o.tasks["done"] > 0, "{name} seed {seed}: nothing was done");
            assert_eq!(o.leftover_leases, 0, "{name} seed {seed}: leftover leases\nreplay: {}", o.replay);
            assert_eq!(o.leftover_permits, 0, "{name} seed {seed}: leftover permits\nreplay: {}", o.replay);
            assert!(o.violations.is_empty(), "{name} seed {seed}: {:?}\nreplay: {}", o.violations, o.replay);
        }
    }
}
