//! `leasesim bench suite`: every measurement of `bench_suite` in one run,
//! printed as one markdown table per measurement and written as JSON.

use crate::bench_suite::{self, Suite, SuiteConfig};
use crate::fuzz::Target;
use std::fmt::Write as _;
use std::path::Path;

/// Runs the suite, prints its tables and writes `out` (JSON).
pub fn run(targets: &[Target], swarm: &Target, config: &SuiteConfig, out: &Path) -> Result<i32, String> {
    let started = std::time::Instant::now();
    let suite = bench_suite::run(targets, swarm, config, &mut |what| {
        eprintln!("bench suite: {what} ({:.0} s)", started.elapsed().as_secs_f64());
    });
    let json = serde_json::to_string_pretty(&suite).expect("a suite serializes");
    crate::export::write_atomic(out, &(json + "\n"))?;
    print!("{}", tables(&suite));
    println!("\nJSON: {} ({:.0} s in all)", out.display(), started.elapsed().as_secs_f64());
    Ok(0)
}

/// The suite as markdown tables (the README's speed section).
pub fn tables(s: &Suite) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "Measured {} on {} ({} build, `cargo sim bench suite`).\n", s.date, s.machine, s.build);
    speed(&mut t, s);
    phases(&mut t, s);
    memory(&mut t, s);
    scaling(&mut t, s);
    find(&mut t, s);
    t
}

fn speed(t: &mut String, s: &Suite) {
    let c = &s.config;
    let _ = writeln!(t, "Speed ({} seeds x {} repeats, medians; faults drawn per seed):\n", c.seeds, c.repeats);
    let _ = writeln!(t, "| scenario | jobs | runs/s | simulated s per wall s | events/s |");
    let _ = writeln!(t, "|---|---|---|---|---|");
    for r in &s.throughput {
        let _ = writeln!(
            t,
            "| {} | {} | {:.1} | {:.0} | {:.0} |",
            r.scenario,
            r.jobs,
            r.median_seeds_per_second,
            bench_suite::sim_rate(r),
            r.median_events_per_second
        );
    }
}

fn phases(t: &mut String, s: &Suite) {
    let _ = writeln!(t, "\nWhere a run's time goes (1 job, ms per run, share of the total):\n");
    let _ = writeln!(t, "| scenario | world | recording | checkers |");
    let _ = writeln!(t, "|---|---|---|---|");
    for p in &s.phases {
        let total = (p.world_ms + p.recording_ms + p.checkers_ms).max(1e-9);
        let share = |ms: f64| format!("{ms:.1} ({:.0}%)", 100.0 * ms / total);
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} |",
            p.scenario,
            share(p.world_ms),
            share(p.recording_ms),
            share(p.checkers_ms)
        );
    }
}

fn memory(t: &mut String, s: &Suite) {
    let m = &s.memory;
    let _ = writeln!(
        t,
        "\nMemory (swarm, {} jobs): peak RSS {:.1} MiB after {} seeds, {:.1} MiB after {} seeds ({:+.1} MiB){}.",
        m.jobs,
        m.early_peak_mib,
        m.early_seeds,
        m.peak_mib,
        m.seeds,
        m.peak_mib - m.early_peak_mib,
        if m.peak_reset { "" } else { " (peak not reset before the campaign)" }
    );
}

fn scaling(t: &mut String, s: &Suite) {
    let _ = writeln!(t, "\nCost against workload size (swarm, every enqueued count multiplied; 1 job):\n");
    let _ = writeln!(t, "| workload | tasks | ms per run | µs per task | events per run | simulated s per run |");
    let _ = writeln!(t, "|---|---|---|---|---|---|");
    for r in &s.scaling {
        let _ = writeln!(
            t,
            "| {}x | {} | {:.1} | {:.0} | {:.0} | {:.0} |",
            r.factor, r.tasks, r.ms_per_seed, r.us_per_task, r.events_per_seed, r.sim_seconds_per_seed
        );
    }
}

fn find(t: &mut String, s: &Suite) {
    let c = &s.config;
    let _ = writeln!(
        t,
        "\nTime to find ({} starts per defect, cap {} seeds per start, {} jobs, on each defect's own scenario):\n",
        c.find_starts, c.find_cap, c.jobs
    );
    let _ = writeln!(t, "| defect | scenario | invariant | found | median seeds | wall s |");
    let _ = writeln!(t, "|---|---|---|---|---|---|");
    for r in &s.find {
        let median = match r.median {
            Some(m) if m != u64::MAX => m.to_string(),
            _ => format!("> {}", c.find_cap),
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {}/{} | {} | {:.1} |",
            r.defect, r.scenario, r.invariant, r.found, r.starts, median, r.wall_seconds
        );
    }
}
