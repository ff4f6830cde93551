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
    let err = scenario::parse_with(text, &leasesim_sim::engines()).expect_err(name);
    assert!(err.contains(field), "{name}: error does not name `{field}`: {err}");
    assert!(!err.contains('\n'), "{name}: error is not one line: {err}");
}

#[test]
fn malformed_scenarios_name_the_field() {
    let good = swarm_text();
    scenario::parse_with(&good, &leasesim_sim::engines()).expect("the built-in swarm scenario parses");
    for (name, mutate, field) in CASES {
        check(name, &mutate(good.clone()), field);
    }
}

#[test]
fn every_builtin_scenario_parses() {
    let names = scenario::builtin_names();
    assert!(names.len() >= 4, "built-in scenarios: {names:?}");
    for name in names {
        scenario::resolve(&name, &leasesim_sim::engines()).unwrap_or_else(|e| panic!("{e}"));
    }
}

// ---------------------------------------------------------------------------
// Values that cannot describe a real world are refused; unusual ones are not
// ---------------------------------------------------------------------------

/// Edits of swarm.toml (`path = value`, `;` between edits) whose values
/// cannot describe a real world, and the field path the error must name.
const REFUSED: &[(&str, &str)] = &[
    // The two the "done when" names.
    ("engine.lease_ttl.workflow_task_ms = 0", "engine.lease_ttl.workflow_task_ms"),
    ("engine.shard_targets = 0", "engine.shard_targets"),
    // [engine]: each field's range (engine::RANGES).
    ("engine.lease_ttl.index_build_ms = 0", "engine.lease_ttl.index_build_ms"),
    ("engine.lease_ttl.authz_materialization_ms = 0", "engine.lease_ttl.authz_materialization_ms"),
    ("engine.lease_ttl.job_ms = 0", "engine.lease_ttl.job_ms"),
    ("engine.lease_ttl.stage_ms = 0", "engine.lease_ttl.stage_ms"),
    ("engine.lease_ttl.activity_ms = 4294967296", "engine.lease_ttl.activity_ms"),
    ("engine.concurrency = 10001", "engine.concurrency"),
    ("engine.shard_targets = 10001", "engine.shard_targets"),
    ("engine.claim_batch_max = 0", "engine.claim_batch_max"),
    ("engine.txn_timeout_ms = 0", "engine.txn_timeout_ms"),
    ("engine.idle_poll_ms = 0", "engine.idle_poll_ms"),
    ("engine.idle_poll_ms = 4294967296", "engine.idle_poll_ms"),
    ("engine.long_poll_ms = 4294967296", "engine.long_poll_ms"),
    ("engine.long_poll_ms = 86400001", "engine.long_poll_ms"),
    ("engine.renew_divisor = 1", "engine.renew_divisor"),
    ("engine.renew_divisor = 101", "engine.renew_divisor"),
    ("engine.heartbeat_interval_ms = 0", "engine.heartbeat_interval_ms"),
    ("engine.dead_after_ms = 4294967296", "engine.dead_after_ms"),
    ("engine.cleanup_interval_ms = 0", "engine.cleanup_interval_ms"),
    ("engine.recovery_interval_ms = 4294967296", "engine.recovery_interval_ms"),
    ("engine.repair_interval_ms = 0", "engine.repair_interval_ms"),
    ("engine.repair_backoff_base_ms = 4294967296", "engine.repair_backoff_base_ms"),
    ("engine.retry_base_ms = 0", "engine.retry_base_ms"),
    ("engine.retry_cap_ms = 4294967296", "engine.retry_cap_ms"),
    ("engine.finalize_deadline_ms = 0", "engine.finalize_deadline_ms"),
    ("engine.finalize_deadline_ms = 4294967296", "engine.finalize_deadline_ms"),
    ("engine.rpc_timeout_ms = 0", "engine.rpc_timeout_ms"),
    ("engine.maintenance_interval_ms = 4294967296", "engine.maintenance_interval_ms"),
    ("engine.maintenance_work_ms = 4294967296", "engine.maintenance_work_ms"),
    // [engine]: relations between fields.
    ("engine.dead_after_ms = 10000", "engine.dead_after_ms"),
    ("engine.retry_cap_ms = 1000", "engine.retry_cap_ms"),
    ("engine.repair_backoff_cap_ms = 1000", "engine.repair_backoff_cap_ms"),
    // [topology], [workload], [phases].
    ("topology.workers = 65", "topology.workers"),
    ("workload.index_builds = 100001", "workload.index_builds"),
    ("workload.after_heal_jobs = 100001", "workload.after_heal_jobs"),
    ("workload.stages_per_pipeline = 0", "workload.stages_per_pipeline"),
    ("workload.stages_per_pipeline = 1001", "workload.stages_per_pipeline"),
    ("workload.workflow_tasks_per_run = 0", "workload.workflow_tasks_per_run"),
    ("workload.workflow_task_gap_ms = 4294967296", "workload.workflow_task_gap_ms"),
    ("workload.work_max_ms = 4294967296", "workload.work_max_ms"),
    ("workload.work_min_ms = 0; workload.work_max_ms = 0", "workload.work_max_ms"),
    ("workload.activity_work_min_ms = 0; workload.activity_work_max_ms = 0", "workload.activity_work_max_ms"),
    ("workload.query_lag_timeout_ms = 86400001", "workload.query_lag_timeout_ms"),
    ("workload.query_lag_max_ms = 4000", "workload.query_lag_max_ms"),
    ("workload.query_lag_max_ms = 86400001", "workload.query_lag_max_ms"),
    ("workload.scheduled_rate = 1.5", "workload.scheduled_rate"),
    ("workload.scheduled_max_ms = 0", "workload.scheduled_max_ms"),
    ("workload.long_work_min_ms = 0", "workload.long_work_min_ms"),
    ("workload.long_work_max_ms = 4294967296", "workload.long_work_max_ms"),
    ("workload.fatal_rate = -0.5", "workload.fatal_rate"),
    ("workload.long_work_rate = 1.5", "workload.long_work_rate"),
    ("workload.after_heal_window_ms = 4294967296", "workload.after_heal_window_ms"),
    ("workload.enqueue_window_ms = 180001", "workload.enqueue_window_ms"),
    ("workload.script = [{ at_ms = 600000, kind = \"job\" }]", "workload.script[0].at_ms"),
    ("phases.fault_phase_ms = 0", "phases.fault_phase_ms"),
    ("phases.heal_phase_ms = 4294967296", "phases.heal_phase_ms"),
    // [bounds]: a liveness bound of 0 demands the impossible.
    ("bounds.claim_bound_ms = 0", "bounds.claim_bound_ms"),
    ("bounds.recovery_bound_ms = 0", "bounds.recovery_bound_ms"),
    ("bounds.materialize_bound_ms = 0", "bounds.materialize_bound_ms"),
    ("bounds.completion_bound_ms = 0", "bounds.completion_bound_ms"),
    ("bounds.claim_bound_ms = 999", "bounds.claim_bound_ms"),
    ("engine.lease_ttl.job_ms = 99", "engine.lease_ttl.job_ms"),
    ("name = \"\"", "name"),
    ("name = \"a/b\"", "name"),
    ("bounds.completion_bound_ms = 4294967296", "bounds.completion_bound_ms"),
    ("bounds.permit_release_slack_ms = 4294967296", "bounds.permit_release_slack_ms"),
    ("bounds.fresh_index_after_heal_ms = 4294967296", "bounds.fresh_index_after_heal_ms"),
    // [faults]: limits a plan could not honour, or absurd ones.
    ("faults.max_events_per_kind = 101", "faults.max_events_per_kind"),
    ("faults.max_window_ms = 0", "faults.max_window_ms"),
    ("faults.max_pause_ms = 999", "faults.max_pause_ms"),
    ("faults.max_partition_ms = 0", "faults.max_partition_ms"),
    ("faults.max_downtime_ms = 4294967296", "faults.max_downtime_ms"),
    ("faults.max_stall_ms = 0", "faults.max_stall_ms"),
    ("faults.max_delay_ms = 0", "faults.max_delay_ms"),
    ("faults.max_clock_offset_ms = 86400001", "faults.max_clock_offset_ms"),
    // [coverage].
    ("coverage.min_seeds = 1000000001", "coverage.min_seeds"),
];

/// Edits of swarm.toml that are merely unusual: they stay accepted.
const ACCEPTED: &[&str] = &[
    "engine.long_poll_ms = 0",           // plain polls
    "engine.long_poll_ms = 86400000",    // a day, the longest
    "engine.max_retries = 0",            // the first failure is final
    "engine.repair_backoff_base_ms = 0", // repair looks at every interval
    "engine.maintenance_work_ms = 0",    // passes with instant store work
    "engine.renew_divisor = 2",          // renew at half the TTL
    "engine.lease_ttl.workflow_task_ms = 100",
    "engine.lease_ttl.activity_ms = 2592000000", // 30 days
    "engine.lease_ttl.job_ms = 60000",           // jobs leased instead of heartbeat-owned
    "workload.enqueue_window_ms = 0",            // everything at once
    "workload.work_min_ms = 0",
    "workload.workflow_task_gap_ms = 0",
    "workload.query_after_ms = 0; workload.query_lag_timeout_ms = 0", // query at once, do not wait
    "workload.pipelines = 0; workload.stages_per_pipeline = 0",
    "workload.after_heal_index_builds = 0; workload.after_heal_jobs = 0",
    "workload.script = [{ at_ms = 599999, kind = \"job\" }]",
    "bounds.permit_release_slack_ms = 0", // strict, not impossible
    "bounds.fresh_index_after_heal_ms = 0",
    "faults.max_events_per_kind = 0", // plans draw no fault
    "faults.max_clock_offset_ms = 0", // no skew
    "faults.max_window_ms = 1000; faults.max_delay_ms = 500",
    "coverage.min_seeds = 0",
];

/// swarm.toml with `edits` applied (each `path = value`, tables created as
/// needed).
fn edited(edits: &str) -> String {
    let mut doc: toml::Table = swarm_text().parse().expect("swarm.toml is TOML");
    for edit in edits.split(';') {
        let (path, value) = edit.split_once('=').expect("an edit is `path = value`");
        let value = format!("v = {}", value.trim()).parse::<toml::Table>().expect("the value is TOML")["v"].clone();
        let mut keys: Vec<&str> = path.trim().split('.').collect();
        let last = keys.pop().expect("a path has a field");
        let mut table = &mut doc;
        for key in keys {
            let entry = table.entry(key).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry.as_table_mut().expect("the path goes through tables");
        }
        table.insert(last.to_string(), value);
    }
    toml::to_string(&doc).expect("serializes")
}

/// The one check of this table: `edits` is refused, through
/// `scenario::parse` and through the binary (exit 2), with one line naming
/// `field`; or, when `field` is `None`, accepted.
fn check_value(edits: &str, field: Option<&str>, dir: &std::path::Path) {
    let text = edited(edits);
    let Some(field) = field else {
        if let Err(e) = scenario::parse_with(&text, &leasesim_sim::engines()) {
            panic!("`{edits}` is merely unusual but was refused: {e}");
        }
        return;
    };
    let err = scenario::parse_with(&text, &leasesim_sim::engines()).expect_err(edits);
    assert!(err.starts_with(&format!("{field}: ")), "`{edits}`: error does not start with `{field}: `: {err}");
    assert!(!err.contains('\n'), "`{edits}`: error is not one line: {err}");
    let file = dir.join("edited.toml");
    std::fs::write(&file, &text).expect("write the edited scenario");
    let (code, _out, stderr) = leasesim(&["run", "--scenario", file.to_str().expect("utf-8 path"), "--seed", "1"]);
    assert_eq!(code, 2, "`{edits}`: exit code {code}, stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "`{edits}`: stderr is not one line: {stderr}");
    assert!(stderr.contains(&format!("{field}: ")), "`{edits}`: stderr does not name `{field}`: {stderr}");
}

#[test]
fn values_that_describe_no_real_world_are_refused() {
    let scratch = common::Scratch::new("bad-values");
    let dir = scratch.path();
    scenario::parse_with(&edited("topology.workers = 3"), &leasesim_sim::engines())
        .expect("the edited swarm scenario still parses");
    for (edits, field) in REFUSED {
        check_value(edits, Some(field), dir);
    }
    for edits in ACCEPTED {
        check_value(edits, None, dir);
    }
}

/// A foreign engine's scenario with an unknown field, a value out of range
/// or a workload the engine cannot run: one line naming the field, exit 2.
#[test]
fn foreign_scenarios_name_the_field() {
    let scratch = common::Scratch::new("bad-foreign");
    let cases: &[(&str, &str, &str, &str)] = &[
        ("apalis-recovery", "[engine]", "[engine]\nheartbeat_intervl_ms = 5000", "engine.heartbeat_intervl_ms"),
        ("apalis-recovery", "[engine]", "[engine]\nbatch_size = 0", "engine.batch_size"),
        ("apalis-recovery", "[engine]", "[engine]\npersistence = \"sometimes\"", "engine.persistence"),
        ("apalis-quiet", "[workload]", "[workload]\nqueues = 2", "workload.queues"),
        ("graphile-recovery", "[engine]", "[engine]\nconcurrencyy = 2", "engine.concurrencyy"),
    ];
    for (i, (name, at, with, field)) in cases.iter().enumerate() {
        let text = std::fs::read_to_string(scenario::builtin_dir().join(format!("{name}.toml"))).expect("read");
        assert!(text.contains(at), "{name} has no {at}");
        let path = scratch.path().join(format!("case-{i}.toml"));
        std::fs::write(&path, text.replacen(at, with, 1)).expect("write");
        let (code, _out, err) = leasesim(&["run", "--scenario", path.to_str().expect("utf-8"), "--seed", "1"]);
        assert_eq!(code, 2, "{name} with {with:?}: exit {code}: {err}");
        assert!(err.contains(field), "{name} with {with:?}: does not name {field}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    }
}

/// Output into a pipe whose reader has gone ends the process quietly (as
/// SIGPIPE ends any Unix tool), never in a panic.
#[test]
fn output_into_a_closed_pipe_is_no_panic() {
    use std::os::fd::FromRawFd;
    // A pipe whose read end is closed before the process starts: its first
    // line meets a closed pipe whatever the timing (`cargo sim list | head -0`).
    let mut fds = [0; 2];
    // SAFETY: `pipe` fills both descriptors; the read end is closed here and
    // the write end owned once, by the child's stdout.
    let write_end = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0, "pipe");
        libc::close(fds[0]);
        std::os::fd::OwnedFd::from_raw_fd(fds[1])
    };
    let child = Command::new(env!("CARGO_BIN_EXE_leasesim"))
        .arg("list")
        .stdout(std::process::Stdio::from(write_end))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run leasesim");
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "list panicked on a closed pipe: {err}");
    assert_ne!(out.status.code(), Some(101), "exit 101 (a panic): {err}");
    // Ended by SIGPIPE, as `ls | head -0` ends `ls`.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "not ended by SIGPIPE: {:?} {err}", out.status);
}

/// Usage lines say what the user types: `cargo sim VERB`.
#[test]
fn usage_lines_say_cargo_sim() {
    for verb in ["run", "fuzz", "replay", "shrink", "bench", "list"] {
        let (code, out, err) = leasesim(&[verb, "--help"]);
        assert_eq!(code, 0, "{verb} --help: {err}");
        assert!(out.contains(&format!("Usage: cargo sim {verb}")), "{verb} --help: {out}");
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
    let scratch = common::Scratch::new("bad-input");
    let bad = scratch.path().join("bad.toml");
    std::fs::write(&bad, swarm_text().replace("workers = 3", "workerz = 3")).expect("write bad scenario");
    let bad = bad.to_str().expect("utf-8 path").to_string();
    let a_scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/swarm.toml");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // A scenario where an entry belongs: what to type instead.
        (vec!["replay", a_scenario], "a scenario, not a corpus entry: run a seed of it with `cargo sim run --scenario"),
        (vec!["shrink", a_scenario], "a scenario, not a corpus entry"),
        (vec!["run", "--scenario", "no-such-scenario", "--seed", "1"], "unknown scenario 'no-such-scenario'"),
        (vec!["run", "--scenario", &bad, "--seed", "1"], "workerz"),
        (vec!["run", "--scenario", "/nonexistent/x.toml", "--seed", "1"], "/nonexistent/x.toml"),
        (vec!["run", "--scenario", "swarm", "--seed", "seven"], "--seed"),
        (vec!["run", "--scenario", "swarm"], "--seed"),
        (vec!["frobnicate"], "frobnicate"),
        (vec!["run", "--scenario", "swarm", "--seed", "1", "--defect", "nope"], "unknown defect 'nope'"),
        // A switch of another engine: refused before the run, not a panic in it.
        (
            vec!["run", "--scenario", "graphile-recovery", "--seed", "7", "--defect", "unfenced-completion"],
            "--defect: scenario graphile-recovery runs graphile-worker",
        ),
        (
            vec!["fuzz", "--scenario", "graphile-all", "--seeds", "2", "--defect", "unfenced-completion"],
            "--defect: scenario graphile-",
        ),
        (vec!["bench", "find", "--on", "graphile-recovery", "--defect", "unfenced-completion"], "--defect: scenario"),
        (vec!["fuzz", "--scenario", "swarm", "--seeds", "3", "--shard", "3/2"], "--shard"),
        (vec!["fuzz", "--scenario", "swarm", "--seeds", "3", "--shard", "0/2"], "--shard"),
        // An empty shard would pass green having run nothing.
        (vec!["fuzz", "--scenario", "swarm", "--seeds", "2", "--shard", "4/4"], "--shard 4/4: none of the 2 seeds"),
        (vec!["fuzz", "--scenario", "swarm", "--time", "5 minutes"], "--time"),
        (vec!["fuzz", "--scenario", "swarm", "--time", "0s"], "--time"),
        (vec!["fuzz", "--scenario", "swarm"], "--seeds or --time"),
        (vec!["fuzz", "--scenario", "swarm", "--seeds", "3", "--jobs", "0"], "--jobs"),
        (vec!["fuzz", "--scenario", "nope", "--seeds", "3"], "unknown scenario 'nope'"),
        (vec!["fuzz", "--scenario", "swarm", "--seeds", "3", "--save", "/proc/leasesim-cannot-write"], "--save"),
        (vec!["replay", "/nonexistent/entry.toml"], "/nonexistent/entry.toml"),
        (vec!["shrink", "/nonexistent/entry.toml"], "/nonexistent/entry.toml"),
        (vec!["bench", "judge", "--scenario", "all"], "judge profiles one scenario"),
        (vec!["bench", "judge", "--seeds", "0"], "--seeds"),
        (vec!["bench", "judge", "--repeats", "0"], "--repeats"),
        (vec!["bench", "false-alarms", "--seeds", "0"], "--seeds"),
        (vec!["bench", "false-alarms", "--seed-start", "18446744073709551615", "--seeds", "2"], "--seeds"),
        (vec!["bench", "throughput", "--seed-start", "5"], "--seed-start"),
        (vec!["bench", "throughput", "--save", "/tmp"], "--save"),
        (vec!["bench", "false-alarms", "--seeds", "1", "--save", "/proc/leasesim-cannot-write"], "--save"),
    ];
    for (args, needle) in cases {
        let (code, _out, err) = leasesim(&args);
        assert_eq!(code, 2, "{args:?}: exit code {code}, stderr: {err}");
        assert!(err.contains(needle), "{args:?}: stderr does not mention `{needle}`: {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}
