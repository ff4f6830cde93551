//! The README's "Use it from your own crate" recipe, followed to the letter:
//! a crate outside this workspace with the README's Cargo.toml lines and
//! `.cargo/config.toml`, and a test in its `tests/`, is built and run, and
//! its simulation test must pass (and a defect must be found).
//!
//! Ignored in a plain `cargo test` (another workspace unifies features
//! differently, so a part of the harness's dependencies is built again: about
//! three minutes on two cores the first time); `.ci/run` runs it with
//! `cargo test --test outside_crate -- --ignored`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository root")
}

/// The ```rust block of the section: the crate's own `main`.
fn recipe_main() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let section = readme.split("### Use it from your own crate").nth(1).expect("the README has the section");
    let section = section.split("\n## ").next().expect("the section ends");
    let block = section.split("```rust\n").nth(1).expect("the section shows a main");
    block.split("```").next().expect("the block ends").to_string()
}

/// The ```toml blocks of the README's "Use it from your own crate" section.
fn recipe() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let section = readme.split("### Use it from your own crate").nth(1).expect("the README has the section");
    let section = section.split("\n## ").next().expect("the section ends");
    let blocks: Vec<String> =
        section.split("```toml\n").skip(1).map(|b| b.split("```").next().expect("a block ends").to_string()).collect();
    assert_eq!(blocks.len(), 2, "the recipe is a Cargo.toml block and a .cargo/config.toml block");
    blocks
}

const TEST: &str = r#"
use leasesim_sim::Simulation;

#[test]
fn a_builtin_world_passes() {
    Simulation::scenario("swarm").seeds(1..=3).run().assert_passes();
}

#[test]
fn a_defect_is_found() {
    let report = Simulation::scenario("b-machines").defect("unfenced-completion").seeds(1..=20).run();
    assert!(!report.passed(), "unfenced-completion went unnoticed");
}
"#;

#[test]
#[ignore = "builds another workspace: run with -- --ignored (.ci/run does)"]
fn the_readme_recipe_builds_an_outside_crate() {
    let blocks = recipe();
    let dir = std::env::temp_dir().join(format!("leasesim-outside-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join(".cargo")).unwrap();
    // The README's paths are relative to a checkout beside the crate.
    let root = repo();
    let deps = blocks[0].replace("../leasesim", root.to_str().expect("utf-8 path"));
    let manifest = format!("[package]\nname = \"outside\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n{deps}");
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join(".cargo/config.toml"), &blocks[1]).unwrap();
    std::fs::write(dir.join("src/main.rs"), recipe_main()).unwrap();
    std::fs::write(dir.join("tests/simulation.rs"), TEST).unwrap();
    // The same versions as this workspace, and its target folder (cargo
    // holds no lock on it while tests run): the build reuses what it can.
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let target = root.join("target");
    let out = Command::new(env!("CARGO"))
        .args(["test", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("run cargo");
    let log = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the outside crate failed:\n{log}");
    assert!(log.contains("2 passed"), "its two tests did not both run:\n{log}");
    // Its own binary is the whole CLI, for the engines it named: the
    // built-in one alone (no default features: no graphile, no apalis).
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO"))
            .args(["run", "--quiet", "--"])
            .args(args)
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .output()
            .expect("run cargo");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, list, err) = cli(&["list"]);
    assert_eq!(code, Some(0), "list: {err}");
    let engines: Vec<&str> = list
        .split("engines (a scenario's [engine] name):\n")
        .nth(1)
        .expect("list names the engines")
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(engines, ["builtin"], "{list}");
    let (code, out, err) = cli(&["run", "--scenario", "b-machines", "--seed", "10", "--defect", "unfenced-completion"]);
    assert_eq!(code, Some(1), "the defect is found by the crate's own CLI:\n{out}\n{err}");
    assert!(
        out.contains("replay: cargo sim run --scenario b-machines --seed 10"),
        "a failure ends with its replay:\n{out}"
    );
    let (code, _, err) = cli(&["run", "--scenario", "graphile-recovery", "--seed", "1"]);
    assert_eq!(code, Some(2), "an engine it did not name is bad input: {err}");
    assert!(err.contains("unknown engine 'graphile-worker' (known: builtin)"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
