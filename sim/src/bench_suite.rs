//! `bench suite`: one run that measures what a long campaign costs. Speed
//! per scenario at 1 and N jobs, where a seed's time goes (world, recording,
//! checkers), memory over a long campaign, how cost grows with the workload,
//! and how many seeds each defect takes to find. Printed as a table and
//! written as JSON; the README's speed section quotes it.
//!
//! Wall-clock time (`std::time::Instant`) is read only here, outside every
//! world: no seed's run depends on it.

use crate::bench::{self, median, FindResult, Mode, Throughput};
use crate::fuzz::{self, Campaign, Target};
use crate::mem;
use crate::runner::{self, RunSpec, DEFAULT_WATCHDOG};
use leasesim::defects::Defect;
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// How much of each measurement to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteConfig {
    /// Jobs of the "N jobs" figures (and of the memory campaign).
    pub jobs: usize,
    /// Throughput: seeds per repeat, and repeats (medians are quoted).
    pub seeds: u64,
    pub repeats: usize,
    /// Phases: seeds per scenario, each run with and without its history.
    pub phase_seeds: u64,
    /// Memory: the swarm campaign's length, and the early milestone.
    pub rss_seeds: u64,
    pub rss_early_seeds: u64,
    /// Scaling: the swarm workload multiplied by each factor; seeds each.
    pub scales: Vec<u32>,
    pub scale_seeds: u64,
    /// Time to find: starts per defect and the cap per start.
    pub find_starts: u64,
    pub find_cap: u64,
}

impl SuiteConfig {
    pub fn standard(jobs: usize) -> Self {
        SuiteConfig {
            jobs,
            seeds: 100,
            repeats: 3,
            phase_seeds: 30,
            rss_seeds: 10_000,
            rss_early_seeds: 1_000,
            scales: vec![1, 4, 16],
            scale_seeds: 10,
            find_starts: 5,
            find_cap: 300,
        }
    }
}

/// Where a seed's time goes, in milliseconds per seed (one job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    pub scenario: String,
    pub seeds: u64,
    /// The simulated world alone: the same seeds run with recording off.
    pub world_ms: f64,
    /// Recording: the history and the tap's reads of the store (the same
    /// seeds with recording on, minus the world alone).
    pub recording_ms: f64,
    /// Checking the history: every checker and the coverage points.
    pub checkers_ms: f64,
}

/// Peak resident memory over one long swarm campaign.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub jobs: usize,
    pub early_seeds: u64,
    pub early_peak_mib: f64,
    pub seeds: u64,
    pub peak_mib: f64,
    /// Whether the process's peak was reset before the campaign (Linux
    /// `clear_refs`); if not, earlier measurements may set the peak.
    pub peak_reset: bool,
}

/// The cost of one swarm seed with its workload multiplied by `factor`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scale {
    pub factor: u32,
    pub tasks: u64,
    pub seeds: u64,
    pub ms_per_seed: f64,
    pub us_per_task: f64,
    pub events_per_seed: f64,
    pub sim_seconds_per_seed: f64,
}

/// Everything one `bench suite` run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suite {
    /// UTC date of the run (YYYY-MM-DD) and the machine it ran on.
    pub date: String,
    pub machine: String,
    /// `release`, or `debug` (figures not worth quoting).
    pub build: String,
    pub config: SuiteConfig,
    pub throughput: Vec<Throughput>,
    pub phases: Vec<Phases>,
    pub memory: Memory,
    pub scaling: Vec<Scale>,
    pub find: Vec<FindResult>,
}

/// Runs every measurement; `say` hears a line before each one starts.
pub fn run(targets: &[Target], swarm: &Target, config: &SuiteConfig, say: &mut dyn FnMut(&str)) -> Suite {
    say("memory");
    let memory = memory(swarm, config);
    let mut throughput = Vec::new();
    let mut phases = Vec::new();
    for target in targets {
        say(&format!("throughput and phases: {}", target.arg));
        throughput.push(bench::throughput(&target.arg, std::slice::from_ref(target), config.seeds, config.repeats, 1));
        throughput.push(bench::throughput(
            &target.arg,
            std::slice::from_ref(target),
            config.seeds,
            config.repeats,
            config.jobs,
        ));
        phases.push(phases_of(target, config.phase_seeds));
    }
    say("scaling");
    let scaling = config.scales.iter().map(|&f| scale(swarm, f, config.scale_seeds)).collect();
    let mut find = Vec::new();
    for defect in Defect::ALL {
        say(&format!("time to find: {defect}"));
        let home = targets.iter().find(|t| t.arg == bench::home_scenario(defect)).unwrap_or(swarm);
        find.push(bench::time_to_find(defect, home, config.find_starts, config.find_cap, config.jobs, Mode::Plain));
    }
    let build = if cfg!(debug_assertions) { "debug" } else { "release" }.to_string();
    Suite {
        date: today(),
        machine: machine(),
        build,
        config: config.clone(),
        throughput,
        phases,
        memory,
        scaling,
        find,
    }
}

/// Runs each seed three ways, interleaved so that noise hits all alike:
/// the world without recording, with recording, then the checkers.
pub fn phases_of(target: &Target, seeds: u64) -> Phases {
    let (mut bare, mut recorded, mut judged) = (Vec::new(), Vec::new(), Vec::new());
    for seed in 1..=seeds {
        let mut spec = RunSpec::new(target.scenario.clone(), target.arg.clone(), seed);
        spec.record = false;
        let start = Instant::now();
        let world = runner::run_world(&spec, DEFAULT_WATCHDOG);
        bare.push(start.elapsed().as_secs_f64() * 1e3);
        spec.record = true;
        let start = Instant::now();
        let Ok(result) = runner::run_world(&spec, DEFAULT_WATCHDOG) else { continue };
        recorded.push(start.elapsed().as_secs_f64() * 1e3);
        let start = Instant::now();
        let _ = runner::judge(&spec, &result);
        judged.push(start.elapsed().as_secs_f64() * 1e3);
        debug_assert!(world.is_ok(), "a world that runs with its history runs without it");
    }
    let mean = |xs: &[f64]| if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 };
    let world_ms = mean(&bare);
    Phases {
        scenario: target.arg.clone(),
        seeds,
        world_ms,
        recording_ms: (mean(&recorded) - world_ms).max(0.0),
        checkers_ms: mean(&judged),
    }
}

fn plain_campaign(target: &Target, seeds: u64, jobs: usize) -> Campaign {
    bench::campaign(std::slice::from_ref(target), 1, seeds, jobs, Vec::new())
}

/// Peak RSS after the early milestone and at the end of one campaign.
pub fn memory(swarm: &Target, config: &SuiteConfig) -> Memory {
    let peak_reset = mem::reset_peak();
    let mut early_peak_mib = 0.0;
    let campaign = plain_campaign(swarm, config.rss_seeds, config.jobs);
    let summary = fuzz::run(&campaign, &AtomicBool::new(false), |p| {
        if p.done == config.rss_early_seeds {
            early_peak_mib = mem::peak_rss_bytes().map_or(0.0, mem::mib);
        }
    });
    Memory {
        jobs: config.jobs,
        early_seeds: config.rss_early_seeds.min(config.rss_seeds),
        early_peak_mib,
        seeds: summary.seeds,
        peak_mib: summary.peak_rss_mib,
        peak_reset,
    }
}

/// The swarm scenario with every enqueued count multiplied by `factor`.
pub fn scaled(swarm: &Target, factor: u32) -> Target {
    let mut scenario = (*swarm.scenario).clone();
    let w = &mut scenario.workload;
    for count in [
        &mut w.index_builds,
        &mut w.authz_materializations,
        &mut w.jobs,
        &mut w.pipelines,
        &mut w.workflow_runs,
        &mut w.after_heal_index_builds,
        &mut w.after_heal_jobs,
    ] {
        *count *= factor;
    }
    Target { arg: format!("{}x{factor}", swarm.arg), scenario: Arc::new(scenario) }
}

/// Tasks one seed of `target` enqueues (stages and workflow tasks included).
pub fn tasks_of(target: &Target) -> u64 {
    let w = &target.scenario.workload;
    let per_run = u64::from(w.workflow_tasks_per_run) + 1;
    u64::from(w.index_builds + w.authz_materializations + w.jobs + w.after_heal_index_builds + w.after_heal_jobs)
        + u64::from(w.pipelines) * u64::from(w.stages_per_pipeline)
        + u64::from(w.workflow_runs) * per_run
}

fn scale(swarm: &Target, factor: u32, seeds: u64) -> Scale {
    let target = scaled(swarm, factor);
    let summary = fuzz::run(&plain_campaign(&target, seeds, 1), &AtomicBool::new(false), |_| {});
    let runs = summary.seeds.max(1) as f64;
    let ms_per_seed = summary.wall_seconds * 1e3 / runs;
    let tasks = tasks_of(&target);
    Scale {
        factor,
        tasks,
        seeds: summary.seeds,
        ms_per_seed,
        us_per_task: ms_per_seed * 1e3 / tasks.max(1) as f64,
        events_per_seed: summary.events as f64 / runs,
        sim_seconds_per_seed: summary.sim_seconds / runs,
    }
}

/// Today's UTC date, from the system clock (a report's label only).
fn today() -> String {
    let days = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Cores, CPU model and memory, as far as `/proc` tells.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map_or("unknown CPU", |m| m.trim_start_matches([' ', '\t', ':']).trim());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1_048_576.0);
    format!("{cores} cores, {model}, {mem_gib:.0} GiB")
}

/// Median of the repeats' simulated seconds per wall second.
pub fn sim_rate(t: &Throughput) -> f64 {
    median(&t.sim_seconds_per_wall_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swarm() -> Target {
        let loaded = crate::scenario::resolve("swarm", &crate::engines()).expect("the built-in swarm");
        Target { arg: "swarm".into(), scenario: Arc::new(loaded.scenario) }
    }

    #[test]
    fn today_is_a_civil_date() {
        let d = today();
        assert_eq!(d.len(), 10, "{d}");
        assert!(d.as_str() >= "2024-01-01", "{d}");
    }

    #[test]
    fn scaling_multiplies_every_enqueued_count() {
        let swarm = swarm();
        let one = tasks_of(&swarm);
        assert!(one > 0);
        assert_eq!(tasks_of(&scaled(&swarm, 4)), 4 * one);
        assert_eq!(
            scaled(&swarm, 4).scenario.workload.stages_per_pipeline,
            swarm.scenario.workload.stages_per_pipeline
        );
    }

    /// The world without its history is the same world: it ends at the same
    /// simulated time with the same final tasks.
    #[test]
    fn recording_off_changes_nothing_the_world_does() {
        let swarm = swarm();
        for seed in 1..=3 {
            let mut spec = RunSpec::new(swarm.scenario.clone(), "swarm", seed);
            let on = runner::run_world(&spec, DEFAULT_WATCHDOG).expect("runs");
            spec.record = false;
            let off = runner::run_world(&spec, DEFAULT_WATCHDOG).expect("runs");
            assert_eq!((on.end_ms, &on.tasks), (off.end_ms, &off.tasks), "seed {seed}");
            assert!(off.history.is_empty() && !on.history.is_empty());
        }
    }
}
