//! Bad input gets a one-line error naming the file and the field, and exit
//! code 2; never a panic, never silently ignored.

mod common;

use leasesim_sim::scenario;
use std::process::Command;

fn swarm_text() -> String {
    std::fs::read_to_string(scenario::builtin_dir().join("swarm.toml")).expect("swarm.toml is readable")
}

/// (what is wrong, text -> bad text, the field the error must name)
type Case = (&'static str, fn(String) -> String, &'static str);

const CASES: &[Case] = &[
    ("unknown top-level field", |t| format!("bogus = 1\n{t}"), "bogus"),
    ("unknown engine field", |t| t.replace("idle_poll_ms", "idle_pol_ms"), "engine.idle_pol_ms"),
    ("unknown lease field", |t| t.replace("activity_ms", "activty_ms"), "engine.lease_ttl.activty_ms"),
    ("wrong type", |t| t.replace("workers = 3", "workers = \"three\""), "topology.workers"),
    ("missing table", |t| t.replace("[bounds]", "[boundz]"), "boundz"),
    ("unknown maintenance kind", |t| t.replace("\"tenant\"", "\"tenants\""), "engine.maintenance"),
    ("zero workers", |t| t.replace("workers = 3", "workers = 0"), "topology.workers"),
    ("rate above one", |t| t.replace("job_fail_rate = 0.2", "job_fail_rate = 1.5"), "workload.job_fail_rate"),
    ("min above max", |t| t.replace("work_min_ms = 200", "work_min_ms = 9_000"), "workload.work_min_ms"),
    ("zero concurrency", |t| t.replace("concurrency = 4", "concurrency = 0"), "engine.concurrency"),
    ("not toml", |_| "this is [not toml".to_string(), "line 1"),
];

fn check(name: &str, text: &str, field: &str) {
    let err = scenario::parse(text).expect_err(name);
    assert!(err.contains(field), "{name}: error does not name `{field}`: {err}");
    assert!(!err.contains('\n'), "{name}: error is not one line: {err}");
}

#[test]
fn malformed_scenarios_name_the_field() {
    let good = swarm_text();
    scenario::parse(&good).expect("the built-in swarm scenario parses");
    for (name, mutate, field) in CASES {
        check(name, &mutate(good.clone()), field);
    }
}

#[test]
fn every_builtin_scenario_parses() {
    let names = scenario::builtin_names();
    assert!(names.len() >= 4, "built-in scenarios: {names:?}");
    for name in names {
        scenario::resolve(&name).unwrap_or_else(|e| panic!("{e}"));
    }
}

fn leasesim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasesim")).args(args).output().expect("run leasesim");
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_bad_input_exits_2_with_one_line() {
    let dir = std::env::temp_dir().join(format!("leasesim-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, swarm_text().replace("workers = 3", "workerz = 3")).expect("write bad scenario");
    let bad = bad.to_str().expect("utf-8 path").to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "--scenario", "no-such-scenario", "--seed", "1"], "unknown scenario 'no-such-scenario'"),
        (vec!["run", "--scenario", &bad, "--seed", "1"], "workerz"),
        (vec!["run", "--scenario", "/nonexistent/x.toml", "--seed", "1"], "/nonexistent/x.toml"),
        (vec!["run", "--scenario", "swarm", "--seed", "seven"], "--seed"),
        (vec!["run", "--scenario", "swarm"], "--seed"),
        (vec!["frobnicate"], "frobnicate"),
        (vec!["run", "--scenario", "swarm", "--seed", "1", "--defect", "nope"], "unknown defect 'nope'"),
        (vec!["fuzz", "--scenario", "swarm", "--seeds", "3", "--shard", "3/2"], "--shard"),
        (vec!["fuzz", "--scenario", "swarm", "--seeds", "3", "--shard", "0/2"], "--shard"),
        (vec!["fuzz", "--scenario", "swarm", "--time", "5 minutes"], "--time"),
        (vec!["fuzz", "--scenario", "swarm", "--time", "0s"], "--time"),
        (vec!["fuzz", "--scenario", "swarm"], "--seeds or --time"),
        (vec!["fuzz", "--scenario", "swarm", "--seeds", "3", "--jobs", "0"], "--jobs"),
        (vec!["fuzz", "--scenario", "nope", "--seeds", "3"], "unknown scenario 'nope'"),
        (vec!["fuzz", "--scenario", "swarm", "--seeds", "3", "--save", "/proc/leasesim-cannot-write"], "--save"),
        (vec!["replay", "/nonexistent/entry.toml"], "/nonexistent/entry.toml"),
        (vec!["shrink", "/nonexistent/entry.toml"], "/nonexistent/entry.toml"),
    ];
    for (args, needle) in cases {
        let (code, _out, err) = leasesim(&args);
        assert_eq!(code, 2, "{args:?}: exit code {code}, stderr: {err}");
        assert!(err.contains(needle), "{args:?}: stderr does not mention `{needle}`: {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}
