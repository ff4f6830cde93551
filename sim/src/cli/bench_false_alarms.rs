//! `bench false-alarms`: how often the correct engine fails on seeds nobody
//! has run before. A checker tuned to the seeds everyone runs cries wolf on
//! new ones, so each measurement draws a fresh range (from the OS, the one
//! place randomness may enter: it only picks which seeds run), prints it
//! first so it replays, runs every built-in scenario of the correct engine
//! over it (plain, or `--guided`) through `fuzz`, and reports the runs, the
//! failures with their replay commands, and the upper bound they give.

use serde::Serialize;
use std::path::Path;
use std::process::Command;

/// What one measurement found: a JSON line of `--out`.
#[derive(Debug, Serialize)]
pub struct FalseAlarms {
    pub seed_start: u64,
    pub seeds: u64,
    pub guided: bool,
    pub runs: u64,
    pub failures: Vec<serde_json::Value>,
    /// The 95% upper bound on failures per million runs.
    pub per_million_95: f64,
    pub wall_seconds: f64,
    /// The command that replays this measurement exactly.
    pub replay: String,
}

/// The 95% upper bound of a Poisson rate, `failures` seen in `runs`
/// (0 failures: 2.996 / runs, the rule of three), per million runs.
pub fn upper_bound_per_million(failures: u64, runs: u64) -> f64 {
    // Upper 95% limits for k = 0..=10 (chi-square / 2 at 0.95, 2k + 2 dof).
    const UPPER: [f64; 11] = [2.996, 4.744, 6.296, 7.754, 9.154, 10.513, 11.842, 13.148, 14.435, 15.705, 16.962];
    let k = failures as usize;
    let limit = UPPER.get(k).copied().unwrap_or(failures as f64 + 1.645 * (failures as f64).sqrt() + 1.0);
    limit / runs.max(1) as f64 * 1e6
}

/// A fresh seed start: far from every range the project's tests and docs
/// use (1..10^7), and never the same twice.
pub fn fresh_start() -> Result<u64, String> {
    use std::io::Read;
    // Read from the OS directly: under madsim the process's own random
    // sources are the simulator's. It picks the range only; every run in
    // it is seeded.
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("/dev/urandom: cannot read a fresh seed start: {e} (give one with --seed-start)"))?;
    Ok(1_000_000_000 + u64::from_le_bytes(bytes) % (u64::MAX / 2))
}

/// Runs `fuzz` over `seeds` seeds of every built-in scenario from `start`.
pub fn measure(start: u64, seeds: u64, guided: bool, jobs: usize, save: &Path) -> Result<FalseAlarms, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut args = vec![
        "fuzz".to_string(),
        "--scenario".into(),
        "all".into(),
        "--seed-start".into(),
        start.to_string(),
        "--seeds".into(),
        seeds.to_string(),
        "--jobs".into(),
        jobs.to_string(),
        "--json".into(),
        "--save".into(),
        save.display().to_string(),
    ];
    if guided {
        args.push("--guided".into());
    }
    let replay = format!(
        "cargo sim {}",
        args.iter().filter(|a| !a.starts_with("--json")).cloned().collect::<Vec<_>>().join(" ")
    );
    let out = Command::new(exe).args(&args).output().map_err(|e| format!("cannot run fuzz: {e}"))?;
    // Exit 0 (no failure) and 1 (failures) both carry the summary.
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(format!(
            "fuzz exited with {} ({replay}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("fuzz's summary: {e}"))?;
    let runs = summary["seeds"].as_u64().ok_or("fuzz's summary has no run count")?;
    let failures = summary["failures"].as_array().cloned().unwrap_or_default();
    let wall_seconds = summary["wall_seconds"].as_f64().unwrap_or(0.0);
    let per_million_95 = upper_bound_per_million(failures.len() as u64, runs);
    Ok(FalseAlarms { seed_start: start, seeds, guided, runs, failures, per_million_95, wall_seconds, replay })
}

#[cfg(test)]
mod tests {
    use super::upper_bound_per_million;

    #[test]
    fn zero_in_a_million_is_below_three_in_a_million() {
        assert!((upper_bound_per_million(0, 1_000_000) - 2.996).abs() < 1e-9);
        assert!((upper_bound_per_million(1, 1_000_000) - 4.744).abs() < 1e-9);
        assert!(upper_bound_per_million(20, 1_000_000) > 20.0);
    }
}
