//! `leasesim bench compare --baseline PATH`: this build against another
//! build of the CLI, side by side in one run. Each repeat runs both, in
//! alternating order (this machine is shared and noisy: alternation spreads
//! the noise over both), as separate processes of the same campaign
//! (`fuzz --scenario S --seeds N --jobs J --json`; the baseline may run
//! its own file of the same world, `--baseline-scenario`). Medians and
//! their ratio.

use std::path::Path;
use std::process::Command;

/// One campaign of one build: runs per wall second, from its JSON summary.
fn one_campaign(exe: &Path, scenario: &str, seeds: u64, jobs: usize) -> Result<f64, String> {
    let out = Command::new(exe)
        .args(["fuzz", "--scenario", scenario, "--seeds", &seeds.to_string(), "--jobs", &jobs.to_string(), "--json"])
        .output()
        .map_err(|e| format!("--baseline {}: cannot run: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).ok_or_else(|| {
        // Its own first error line says why: an older build reads the
        // built-in scenarios of the tree it was built in, and may not parse
        // today's (pass the old scenario's file as --scenario then).
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr.lines().find(|l| l.starts_with("error")).unwrap_or("no error line");
        format!("{}: no JSON summary (exit {:?}): {why}", exe.display(), out.status.code())
    })?;
    let summary: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("{}: its summary is not JSON: {e}", exe.display()))?;
    // `seeds` counts runs (seed x scenario) in every build so far.
    let runs = summary["seeds"].as_f64().ok_or_else(|| format!("{}: summary without seeds", exe.display()))?;
    let wall =
        summary["wall_seconds"].as_f64().ok_or_else(|| format!("{}: summary without wall_seconds", exe.display()))?;
    Ok(runs / wall.max(1e-9))
}

fn median(mut xs: Vec<f64>) -> f64 {
    assert!(!xs.is_empty(), "a median of nothing");
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[mid]
    } else {
        (xs[mid - 1] + xs[mid]) / 2.0
    }
}

/// Runs the comparison and prints one markdown row per job count. This
/// build runs `scenarios.0`, the baseline `scenarios.1` (the same world
/// where the old build cannot parse today's file).
pub fn run(
    baseline: &Path,
    scenarios: (&str, &str),
    seeds: u64,
    repeats: usize,
    jobs: &[usize],
) -> Result<i32, String> {
    let (scenario, baseline_scenario) = scenarios;
    let this = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    if !baseline.is_file() {
        return Err(format!("--baseline {}: no such executable", baseline.display()));
    }
    if baseline_scenario != scenario {
        println!("this build runs --scenario {scenario}, the baseline {baseline_scenario}\n");
    }
    println!("| build | jobs | median runs/s | repeats |");
    println!("|---|---|---|---|");
    for &j in jobs {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for repeat in 0..repeats {
            // Alternate who goes first: a drift in the machine's load
            // then falls on both builds alike.
            if repeat % 2 == 0 {
                theirs.push(one_campaign(baseline, baseline_scenario, seeds, j)?);
                ours.push(one_campaign(&this, scenario, seeds, j)?);
            } else {
                ours.push(one_campaign(&this, scenario, seeds, j)?);
                theirs.push(one_campaign(baseline, baseline_scenario, seeds, j)?);
            }
            eprintln!("bench compare: {j} jobs, repeat {} of {repeats} done", repeat + 1);
        }
        let show = |xs: &[f64]| xs.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(", ");
        let (m_ours, m_theirs) = (median(ours.clone()), median(theirs.clone()));
        println!("| baseline {} | {j} | {m_theirs:.1} | {} |", baseline.display(), show(&theirs));
        println!("| this build | {j} | {m_ours:.1} | {} |", show(&ours));
        println!("| ratio | {j} | {:.2}x | |", m_ours / m_theirs);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn medians() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
