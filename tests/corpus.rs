//! Replays every corpus entry and checks its expectation: a saved failure
//! must still fail the same way, a pinned pass must still pass with the same
//! trace hash. A failing entry prints the command that replays it.

use leasesim_sim::corpus::{self, Entry};
use leasesim_sim::runner;
use std::path::{Path, PathBuf};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus")
}

/// Replays one entry; `Err` carries a message ending with the replay command.
fn check(path: &Path) -> Result<(), String> {
    let entry = Entry::load(path, &leasesim_sim::engines())?;
    let spec = entry.spec(path, &leasesim_sim::engines())?;
    let replay = spec.replay_command();
    let outcome = match runner::run_seed(&spec, runner::DEFAULT_WATCHDOG) {
        Ok(outcome) => outcome,
        Err(e) => {
            return if e.kind() == entry.expect {
                Ok(())
            } else {
                Err(format!("{}: {e}\n  replay: {replay}", path.display()))
            };
        }
    };
    entry.verify(&outcome).map_err(|e| format!("{}: {e}\n  replay: {replay}", path.display()))?;
    entry.verify_comment(&outcome).map_err(|e| format!("{}: {e}\n  replay: {replay}", path.display()))
}

#[test]
fn every_corpus_entry_still_reproduces() {
    let paths = corpus::entries(&corpus_dir()).expect("corpus/ is readable");
    assert!(paths.len() >= 8, "the corpus has only {} entries", paths.len());
    let failures: Vec<String> = paths.iter().filter_map(|p| check(p).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} corpus entries failed:\n{}",
        failures.len(),
        paths.len(),
        failures.join("\n")
    );
}

#[test]
fn every_entry_is_pinned_against_drift() {
    for path in corpus::entries(&corpus_dir()).expect("corpus/ is readable") {
        let entry = Entry::load(&path, &leasesim_sim::engines()).expect("entries parse");
        assert_eq!(entry.faults, corpus::FaultsMode::Explicit, "{}: the fault plan is not written out", path.display());
        assert!(entry.world.is_some(), "{}: the world is not inline", path.display());
    }
}

#[test]
fn every_defect_has_a_reproducing_entry() {
    let mut missing: Vec<&str> = leasesim::defects::Defect::ALL.iter().map(|d| d.name()).collect();
    for path in corpus::entries(&corpus_dir()).expect("corpus/ is readable") {
        let entry = Entry::load(&path, &leasesim_sim::engines()).expect("entries parse");
        if entry.expect != "pass" {
            missing.retain(|name| !entry.defects.iter().any(|d| d == name));
        }
    }
    assert!(missing.is_empty(), "no corpus entry reproduces: {missing:?}");
}

#[test]
fn a_broken_expectation_is_reported_with_its_replay_command() {
    // A passing seed saved as if it violated an invariant must fail, naming
    // the entry and how to replay it.
    let dir = std::env::temp_dir().join(format!("leasesim-corpus-test-{}", std::process::id()));
    let entry = Entry::parse(
        "comment = \"a lie\"\nscenario = \"swarm\"\nseed = 1\nfaults = \"none\"\nexpect = \"fenced-completion\"\n",
        &leasesim_sim::engines(),
    )
    .expect("the entry parses");
    let path = corpus::save_new(&dir, "lie", &entry).expect("saved");
    let err = check(&path).expect_err("a pass cannot reproduce a violation");
    assert!(err.contains("no longer reproduces"), "{err}");
    assert!(err.contains("cargo sim replay"), "{err}");
    // Saving again never overwrites: it picks a new name.
    let second = corpus::save_new(&dir, "lie", &entry).expect("saved again");
    assert_ne!(second, path);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), std::fs::read_to_string(&second).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_entries_name_the_field() {
    let cases = [
        ("scenario = \"swarm\"\nseed = 1\nexpect = \"pass\"\n", "comment"),
        ("comment = \"c\"\nscenario = \"swarm\"\nseed = 1\nexpect = \"pass\"\nbogus = 2\n", "bogus"),
        ("comment = \"c\"\nscenario = \"swarm\"\nseed = 1\nexpect = \"nonsense\"\n", "expect"),
        ("comment = \"c\"\nscenario = \"swarm\"\nseed = -1\nexpect = \"pass\"\n", "seed"),
        ("comment = \"c\"\nscenario = \"swarm\"\nseed = 1\nexpect = \"pass\"\ndefects = [\"nope\"]\n", "defects"),
        ("comment = \"c\"\nscenario = \"swarm\"\nseed = 1\nexpect = \"pass\"\nfaults = \"sometimes\"\n", "faults"),
    ];
    for (text, field) in cases {
        let err = Entry::parse(text, &leasesim_sim::engines()).expect_err(text);
        assert!(err.contains(field), "error for {text:?} does not name `{field}`: {err}");
        assert!(!err.contains('\n'), "not one line: {err}");
    }
}

/// Every corpus entry a help text or a document names exists: a user who
/// copies an example gets a run, not "cannot read".
#[test]
fn every_entry_the_help_and_the_docs_name_exists() {
    let root = corpus_dir().join("..");
    let mut texts: Vec<(String, String)> = Vec::new();
    for verb in ["run", "fuzz", "replay", "shrink", "bench", "list"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_leasesim"))
            .args([verb, "--help"])
            .output()
            .expect("run leasesim --help");
        texts.push((format!("leasesim {verb} --help"), String::from_utf8_lossy(&out.stdout).into_owned()));
    }
    for doc in [
        "README.md",
        "ARCHITECTURE.md",
        "corpus/README.md",
        "docs/real-bugs.md",
        "docs/findings/graphile-worker.md",
        "docs/design.md",
        "docs/trace-changes.md",
    ] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
        texts.push((doc.to_string(), text));
    }
    let mut missing = Vec::new();
    let mut named = 0;
    for (source, text) in &texts {
        for (i, _) in text.match_indices("corpus/") {
            // `new-corpus/...` in an example is the user's folder, not ours.
            if text[..i].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                continue;
            }
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.'))
                .collect();
            let Some(name) = name.strip_suffix('.').or(Some(name.as_str())).filter(|n| n.ends_with(".toml")) else {
                continue;
            };
            named += 1;
            if !root.join(name).is_file() {
                missing.push(format!("{source}: {name}"));
            }
        }
    }
    assert!(named >= 5, "only {named} entries named");
    assert!(missing.is_empty(), "named but not in the corpus:\n{}", missing.join("\n"));
}

/// Every seed a campaign can produce round-trips through an entry: guided
/// campaigns draw seeds over all of u64, and TOML's integers stop at i64's
/// range (a guided failure above it once panicked the campaign and was
/// lost). Each edge is written, read back equal, and replayed as a run of
/// the same seed and plan, a mutated (guided) plan included.
#[test]
fn entries_round_trip_every_seed_and_guided_plan() {
    use leasesim_sim::faults::{self, FaultPlan};
    use leasesim_sim::runner::{PlanSource, RunSpec};
    use leasesim_sim::scenario;
    use rand::SeedableRng;
    use std::sync::Arc;

    let loaded = scenario::resolve("swarm", &leasesim_sim::engines()).expect("swarm is built in");
    let world = Arc::new(loaded.scenario);
    let seeds = [0, 1, i64::MAX as u64, i64::MAX as u64 + 1, 10_634_638_970_797_174_518, u64::MAX - 1, u64::MAX];
    for seed in seeds {
        let drawn = RunSpec::new(world.clone(), "swarm", seed).fault_plan();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let guided = faults::mutate(&drawn, &mut rng, &world);
        for plan in [drawn, guided] {
            let spec = RunSpec::new(world.clone(), "swarm", seed)
                .with_plan(PlanSource::Explicit(FaultPlan { events: plan.events.clone() }));
            let entry = Entry::of_run(&spec, "pass", format!("seed {seed}"));
            let text = entry.to_toml().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let back =
                Entry::parse(&text, &leasesim_sim::engines()).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
            assert_eq!(back, entry, "seed {seed}: the entry read back differs");
            let replayed = back.spec(Path::new("round-trip.toml"), &leasesim_sim::engines()).expect("the entry's run");
            assert_eq!((replayed.seed, replayed.fault_plan().events), (seed, plan.events), "seed {seed}");
        }
    }
    // Out of range, or not a number: one line naming the field.
    for bad in ["\"18446744073709551616\"", "\"-1\"", "\"\"", "\"0x10\"", "1.5"] {
        let text = format!("comment = \"c\"\nscenario = \"swarm\"\nseed = {bad}\nexpect = \"pass\"\n");
        let err = Entry::parse(&text, &leasesim_sim::engines()).expect_err(bad);
        assert!(err.contains("seed"), "{bad}: {err}");
    }
}
