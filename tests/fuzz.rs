//! A swarm campaign with faults, in `cargo test`: every built-in scenario,
//! a fault plan drawn from each seed, the library's campaign code
//! (`leasesim_sim::Simulation` over `fuzz::run`). Small by default
//! (`DEFAULT_SEEDS` seeds per scenario); steered by the environment:
//!
//! - `LEASESIM_SEEDS=N`: seeds `1..=N` of each scenario.
//! - `LEASESIM_SEED=S`: exactly seed `S` (replays a failure).
//! - `LEASESIM_SCENARIO=NAME`: one built-in scenario (`all`: every one).
//! - `LEASESIM_DEFECT=a,b`: defect switches on, kebab-case (`cargo sim list`).
//!
//! Each failure prints first the line that replays it here, then the
//! campaign's `FAIL` line (scenario, seed, invariant, message, the `cargo
//! sim run` line) and where it was saved: a pinned corpus entry in
//! `target/leasesim-failures/`, written atomically, never overwritten
//! (`cargo sim replay FILE`).
//!
//! ```text
//! LEASESIM_DEFECT=unfenced-completion LEASESIM_SCENARIO=b-machines LEASESIM_SEEDS=100 \
//!     cargo test --release --test fuzz
//! ```

use leasesim::defects::Defect;
use leasesim_sim::{scenario, Simulation};

/// Seeds per scenario without `LEASESIM_SEEDS`: enough to run every fault
/// kind on every scenario, few enough for `cargo test` (about 2 s debug).
const DEFAULT_SEEDS: u64 = 20;

/// What the environment asks for.
#[derive(Debug, PartialEq)]
struct Knobs {
    /// `start..end`, end excluded.
    seeds: (u64, u64),
    scenarios: Vec<String>,
    defects: Vec<Defect>,
}

impl Knobs {
    fn from_env() -> Knobs {
        Knobs::read(|name| std::env::var(name).ok())
    }

    /// The knobs `var` gives (unset or blank: the default). A value that
    /// makes no sense panics, naming the variable.
    fn read(var: impl Fn(&str) -> Option<String>) -> Knobs {
        let var = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let number = |name: &str| {
            var(name).map(|v| {
                v.parse::<u64>().unwrap_or_else(|_| panic!("{name}={v:?}: not a number (example: {name}=100)"))
            })
        };
        let seeds = match (number("LEASESIM_SEED"), number("LEASESIM_SEEDS")) {
            (Some(_), Some(_)) => panic!("LEASESIM_SEED and LEASESIM_SEEDS: give one of them, not both"),
            (Some(seed), None) => (seed, seed.checked_add(1).expect("LEASESIM_SEED: below u64::MAX")),
            (None, Some(0)) => panic!("LEASESIM_SEEDS=0: must be at least 1"),
            (None, Some(n)) => (1, n.saturating_add(1)),
            (None, None) => (1, DEFAULT_SEEDS + 1),
        };
        let builtin = scenario::builtin_engine_names();
        assert!(!builtin.is_empty(), "no built-in scenario in {}", scenario::builtin_dir().display());
        let scenarios = match var("LEASESIM_SCENARIO") {
            None => builtin,
            Some(all) if all == "all" => builtin,
            Some(name) if builtin.contains(&name) => vec![name],
            Some(name) => {
                panic!(
                    "LEASESIM_SCENARIO={name:?}: no such built-in scenario (built-in: {}, or all)",
                    builtin.join(", ")
                )
            }
        };
        let defects = var("LEASESIM_DEFECT")
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(|name| {
                        Defect::from_name(name).unwrap_or_else(|| {
                            let known: Vec<&str> = Defect::ALL.iter().map(|d| d.name()).collect();
                            panic!("LEASESIM_DEFECT: unknown defect {name:?} (known: {})", known.join(", "))
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Knobs { seeds, scenarios, defects }
    }

    /// The line that re-runs exactly `seed` of `scenario` here.
    fn replay_line(&self, scenario: &str, seed: u64) -> String {
        let defects = match self.defects.is_empty() {
            true => String::new(),
            false => {
                let names: Vec<&str> = self.defects.iter().map(|d| d.name()).collect();
                format!(" LEASESIM_DEFECT={}", names.join(","))
            }
        };
        format!("LEASESIM_SEED={seed} LEASESIM_SCENARIO={scenario}{defects} cargo test --release --test fuzz")
    }

    /// What this test prints for one failing run: the line that replays it
    /// here, then the campaign's lines for it (its `FAIL` line, where it
    /// was saved).
    fn failure_block(&self, scenario: &str, run: &leasesim_sim::Run) -> Vec<String> {
        let mut lines = vec![self.replay_line(scenario, run.seed)];
        lines.extend(run.failure_lines().iter().map(|detail| format!("  {detail}")));
        lines
    }
}

/// README.md shows what this test prints for the first failure of the
/// README's example command. The block is regenerated here, never copied
/// by hand: `LEASESIM_UPDATE_README=1 cargo test --test fuzz readme`
/// writes what the test prints today into README.md.
#[test]
fn the_readme_example_is_what_this_test_prints() {
    let command = [
        "$ LEASESIM_DEFECT=unfenced-completion LEASESIM_SCENARIO=b-machines LEASESIM_SEEDS=100 \\",
        "    cargo test --release --test fuzz",
    ];
    let vars =
        [("LEASESIM_DEFECT", "unfenced-completion"), ("LEASESIM_SCENARIO", "b-machines"), ("LEASESIM_SEEDS", "100")];
    let knobs = Knobs::read(|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()));
    let scratch = std::env::temp_dir().join(format!("leasesim-readme-example-{}", std::process::id()));
    let name = &knobs.scenarios[0];
    let (start, end) = knobs.seeds;
    // The first failing seed, ten seeds at a time: the test prints
    // failures in seed order.
    let first = (start..end).step_by(10).find_map(|from| {
        let seeds = from..(from + 10).min(end);
        let campaign = Simulation::scenario(name).seeds(seeds).defects(knobs.defects.iter().copied());
        let report = campaign.save_failures_in(&scratch).run();
        let block = report.failures().next().map(|run| knobs.failure_block(name, run));
        block
    });
    let _ = std::fs::remove_dir_all(&scratch);
    let first = first.expect("the README's example command finds a failure in its 100 seeds");
    let scratch = scratch.to_str().expect("a UTF-8 temp dir");
    let mut want: Vec<String> = command.iter().map(|l| l.to_string()).collect();
    want.extend(first.iter().map(|l| l.replace(scratch, ".../target/leasesim-failures")));
    want.push("...".into());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    let from = lines.iter().position(|l| *l == command[0]).expect("README.md shows the example command");
    let to = from + lines[from..].iter().position(|l| *l == "```").expect("the example's block ends");
    if lines[from..to] == want.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        return;
    }
    if std::env::var("LEASESIM_UPDATE_README").is_ok_and(|v| v == "1") {
        let mut out: Vec<String> = lines[..from].iter().map(|l| l.to_string()).collect();
        out.extend(want);
        out.extend(lines[to..].iter().map(|l| l.to_string()));
        std::fs::write(&path, out.join("\n") + "\n").expect("write README.md");
        return;
    }
    panic!(
        "README.md's example shows other lines than this test prints today; \
         LEASESIM_UPDATE_README=1 cargo test --test fuzz readme writes these:\n{}",
        want.join("\n")
    );
}

#[test]
fn swarm_with_faults_on_every_builtin_scenario() {
    let knobs = Knobs::from_env();
    let (start, end) = knobs.seeds;
    let defects: Vec<&str> = knobs.defects.iter().map(|d| d.name()).collect();
    println!(
        "fuzz: seeds {start}..={} on {} ({}), faults drawn from each seed, defects: {}",
        end - 1,
        match knobs.scenarios.len() {
            1 => "1 scenario".to_string(),
            n => format!("{n} scenarios"),
        },
        knobs.scenarios.join(", "),
        if defects.is_empty() { "none".to_string() } else { defects.join(", ") }
    );
    let mut seed_lines = Vec::new();
    for name in &knobs.scenarios {
        let report =
            Simulation::scenario(name).seeds(start..end).defects(knobs.defects.iter().copied()).save_failures().run();
        let s = &report.summary;
        println!(
            "{name}: {} seeds, {} failures, {} events, {:.1} s wall",
            s.seeds,
            s.failures.len(),
            s.events,
            s.wall_seconds
        );
        for run in report.failures() {
            for line in knobs.failure_block(name, run) {
                println!("{line}");
            }
            seed_lines.push(knobs.replay_line(name, run.seed));
        }
    }
    assert!(
        seed_lines.is_empty(),
        "{} failing seeds (each printed above with its invariant, message and replay lines):\n{}",
        seed_lines.len(),
        seed_lines.join("\n")
    );
}

#[cfg(test)]
mod knobs {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Knobs {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Knobs::read(move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_values() {
        let all = read(&[]);
        assert_eq!(all.seeds, (1, DEFAULT_SEEDS + 1));
        assert_eq!(all.scenarios, scenario::builtin_engine_names());
        assert!(all.defects.is_empty());
        let one = read(&[
            ("LEASESIM_SEED", "42"),
            ("LEASESIM_SCENARIO", "b-machines"),
            ("LEASESIM_DEFECT", "unfenced-completion, repair-hides-expired-lease"),
        ]);
        assert_eq!(one.seeds, (42, 43));
        assert_eq!(one.scenarios, ["b-machines"]);
        assert_eq!(one.defects, [Defect::UnfencedCompletion, Defect::RepairHidesExpiredLease]);
        assert_eq!(
            one.replay_line("b-machines", 42),
            "LEASESIM_SEED=42 LEASESIM_SCENARIO=b-machines \
             LEASESIM_DEFECT=unfenced-completion,repair-hides-expired-lease cargo test --release --test fuzz"
        );
        assert_eq!(read(&[("LEASESIM_SEEDS", "100"), ("LEASESIM_SCENARIO", "all")]).seeds, (1, 101));
    }

    #[test]
    #[should_panic(expected = "LEASESIM_SEEDS=\"ten\": not a number")]
    fn a_count_that_is_no_number() {
        read(&[("LEASESIM_SEEDS", "ten")]);
    }

    #[test]
    #[should_panic(expected = "LEASESIM_SEED=\"-1\": not a number")]
    fn a_negative_seed() {
        read(&[("LEASESIM_SEED", "-1")]);
    }

    #[test]
    #[should_panic(expected = "LEASESIM_SEEDS=0: must be at least 1")]
    fn zero_seeds() {
        read(&[("LEASESIM_SEEDS", "0")]);
    }

    #[test]
    #[should_panic(expected = "LEASESIM_SCENARIO=\"b-machine\": no such built-in scenario")]
    fn an_unknown_scenario() {
        read(&[("LEASESIM_SCENARIO", "b-machine")]);
    }

    #[test]
    #[should_panic(expected = "LEASESIM_DEFECT: unknown defect \"unfenced\"")]
    fn an_unknown_defect() {
        read(&[("LEASESIM_DEFECT", "unfenced")]);
    }

    #[test]
    #[should_panic(expected = "LEASESIM_SEED and LEASESIM_SEEDS")]
    fn both_a_seed_and_a_count() {
        read(&[("LEASESIM_SEED", "3"), ("LEASESIM_SEEDS", "10")]);
    }
}
