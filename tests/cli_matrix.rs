//! Every verb, and every flag a user can add to it, against every engine the
//! CLI ships with (not only the built-in one): no command may end in a panic
//! (exit 101) or a signal (issue 38, "no panic, anywhere").
//!
//! Not the cross product of verbs, flags and engines: each flag at least once
//! with each engine, several flags per command, on each engine's cheapest
//! scenario, its group (`all`, `graphile-all`, `apalis-all`) and a failing
//! corpus entry of it, with the smallest counts each verb accepts. A case
//! meant to run must exit 0, 1 or 3 (it ran and judged); a case of bad input
//! must exit 2 (a one-line error, before any run); stderr never says
//! "panicked". Cases run a few at a time: this is a debug build, where a
//! foreign engine's world takes seconds.

mod common;

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

const EXE: &str = env!("CARGO_BIN_EXE_leasesim");

/// Each engine `cargo sim list --json` names: its cheapest scenario, its
/// group, and a failing corpus entry of it (the cheapest there is).
const ENGINES: &[Engine] = &[
    Engine {
        name: "builtin",
        scenario: "c-workflows",
        group: "all",
        entry: "b-machines-fenced-completion-unfenced-completion-seed10-shrunk.toml",
    },
    Engine {
        name: "graphile-worker",
        scenario: "graphile-recovery",
        group: "graphile-all",
        entry: "graphile-recovery-fenced-completion-seed48-shrunk.toml",
    },
    Engine {
        name: "apalis-redis",
        scenario: "apalis-retries",
        group: "apalis-all",
        entry: "apalis-retries-retry-budget-seed1.toml",
    },
];

/// The engine `bench find` measures (its defects are the built-in engine's).
const BUILTIN: &str = "builtin";

/// A passing corpus entry (`replay` of an entry that passes).
const PASS_ENTRY: &str = "swarm-pass-seed1.toml";

struct Engine {
    name: &'static str,
    scenario: &'static str,
    group: &'static str,
    entry: &'static str,
}

/// What a case must end with.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// It ran and judged: 0 (passed), 1 (a run failed) or 3 (coverage).
    Ran,
    /// Bad input: 2, one line, before any run.
    BadInput,
}

struct Case {
    args: Vec<String>,
    expect: Expect,
}

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus").join(name)
}

fn leasesim_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(EXE).args(args).current_dir(dir).output().expect("run leasesim")
}

/// Each engine's defect switches, and which engine runs each scenario, as
/// `list --json` says.
struct Listed {
    switches: Vec<(String, Vec<String>)>,
    scenario_engine: Vec<(String, String)>,
}

fn listed(dir: &Path) -> Listed {
    let out = leasesim_in(dir, &["list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "list --json: {}", String::from_utf8_lossy(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("list --json prints one object");
    let name = |v: &serde_json::Value| v["name"].as_str().expect("a name").to_string();
    let switches = list["engines"]
        .as_array()
        .expect("engines")
        .iter()
        .map(|e| (name(e), e["defects"].as_array().expect("defects").iter().map(name).collect()))
        .collect();
    let scenario_engine = list["scenarios"]
        .as_array()
        .expect("scenarios")
        .iter()
        .map(|s| (name(s), s["engine"].as_str().expect("an engine").to_string()))
        .collect();
    Listed { switches, scenario_engine }
}

/// Builds the matrix: output paths are fresh files and folders of `dir`.
struct Matrix<'a> {
    dir: &'a Path,
    next: usize,
    cases: Vec<Case>,
}

impl Matrix<'_> {
    /// A new path in the scratch folder (not created).
    fn file(&mut self, ext: &str) -> String {
        self.next += 1;
        self.dir.join(format!("out{}.{ext}", self.next)).display().to_string()
    }

    /// A new, empty folder in the scratch folder.
    fn folder(&mut self) -> String {
        self.next += 1;
        let path = self.dir.join(format!("dir{}", self.next));
        std::fs::create_dir_all(&path).expect("create a folder");
        path.display().to_string()
    }

    /// A copy of `entry` alone in a new folder (`shrink` and `--pin-pass`
    /// write beside it), its text edited by `edit`.
    fn copy(&mut self, entry: &Path, edit: impl Fn(String) -> String) -> String {
        let folder = PathBuf::from(self.folder());
        let text = std::fs::read_to_string(entry).unwrap_or_else(|e| panic!("{}: {e}", entry.display()));
        let path = folder.join(entry.file_name().expect("a file name"));
        std::fs::write(&path, edit(text)).expect("write the copy");
        path.display().to_string()
    }

    fn add(&mut self, expect: Expect, args: &[&str]) {
        self.cases.push(Case { args: args.iter().map(|a| a.to_string()).collect(), expect });
    }
}

/// Every case of one engine.
fn engine_cases(m: &mut Matrix<'_>, e: &Engine, own: Option<&str>, foreign: Option<&str>) {
    use Expect::{BadInput, Ran};
    let (s, g) = (e.scenario, e.group);
    let entry = corpus(e.entry);
    let entry = entry.to_str().expect("a UTF-8 path");
    let exe = EXE;

    // run: pictures, history, JSON, a window, no faults, determinism.
    let (svg, trace, history) = (m.file("svg"), m.file("json"), m.file("jsonl"));
    m.add(Ran, &["run", "--scenario", s, "--seed", "1", "--svg", &svg, "--trace", &trace, "--history", &history]);
    let svg = m.file("svg");
    m.add(Ran, &["run", "--scenario", s, "--seed", "1", "--json", "--svg", &svg, "--around-violation"]);
    let svg = m.file("svg");
    m.add(
        Ran,
        &["run", "--scenario", s, "--seed", "2", "--svg", &svg, "--from", "1s", "--to", "60s", "--faults", "none"],
    );
    m.add(Ran, &["run", "--scenario", s, "--seed", "1", "--check-determinism"]);
    // run takes one scenario, not a group.
    m.add(BadInput, &["run", "--scenario", g, "--seed", "1"]);

    // fuzz: a shard, jobs, no faults; the group with JSON, a save folder and
    // a time budget; guided; an empty shard.
    m.add(
        Ran,
        &[
            "fuzz",
            "--scenario",
            s,
            "--seeds",
            "2",
            "--seed-start",
            "5",
            "--shard",
            "1/2",
            "--jobs",
            "2",
            "--faults",
            "none",
        ],
    );
    let save = m.folder();
    m.add(Ran, &["fuzz", "--scenario", g, "--seeds", "1", "--json", "--save", &save, "--time", "10m", "--jobs", "2"]);
    let save = m.folder();
    m.add(Ran, &["fuzz", "--scenario", s, "--seeds", "1", "--guided", "--save", &save]);
    m.add(BadInput, &["fuzz", "--scenario", s, "--seeds", "1", "--shard", "1/2"]);
    m.add(Ran, &["fuzz", "--scenario", s, "--time", "1s", "--json", "--jobs", "1"]);

    // Its own defect switch runs; another engine's is refused before any run.
    if let Some(own) = own {
        m.add(Ran, &["run", "--scenario", s, "--seed", "1", "--defect", own, "--json"]);
        m.add(Ran, &["fuzz", "--scenario", g, "--seeds", "1", "--defect", own]);
    }
    if let Some(foreign) = foreign {
        m.add(BadInput, &["run", "--scenario", s, "--seed", "7", "--defect", foreign]);
        m.add(BadInput, &["fuzz", "--scenario", g, "--seeds", "1", "--defect", foreign]);
    }

    // replay: JSON with pictures and history; a window and --pin-pass (on a
    // copy: a pin is written beside the entry).
    let (svg, trace, history) = (m.file("svg"), m.file("json"), m.file("jsonl"));
    m.add(
        Ran,
        &["replay", entry, "--json", "--svg", &svg, "--trace", &trace, "--history", &history, "--around-violation"],
    );
    let copy = m.copy(Path::new(entry), |t| t);
    let svg = m.file("svg");
    m.add(Ran, &["replay", &copy, "--svg", &svg, "--from", "1s", "--to", "60s", "--pin-pass"]);

    // shrink: beside the entry (a copy), and into --out.
    let copy = m.copy(Path::new(entry), |t| t);
    m.add(Ran, &["shrink", &copy, "--budget", "1"]);
    let out = m.folder();
    m.add(Ran, &["shrink", entry, "--budget", "5", "--out", &out]);

    // bench: throughput of the scenario and of the group, judge, compare
    // (against this very executable), find.
    m.add(Ran, &["bench", "throughput", "--scenario", s, "--seeds", "1", "--repeats", "1", "--jobs", "1"]);
    m.add(Ran, &["bench", "throughput", "--scenario", g, "--seeds", "1", "--repeats", "1", "--jobs", "2", "--json"]);
    m.add(Ran, &["bench", "judge", "--scenario", s, "--seeds", "1", "--repeats", "1"]);
    m.add(Ran, &["bench", "judge", "--scenario", s, "--seeds", "1", "--repeats", "1", "--json"]);
    m.add(BadInput, &["bench", "judge", "--scenario", g, "--seeds", "1", "--repeats", "1"]);
    m.add(
        Ran,
        &["bench", "compare", "--baseline", exe, "--scenario", s, "--seeds", "1", "--repeats", "1", "--jobs", "1"],
    );
    m.add(
        Ran,
        &[
            "bench",
            "compare",
            "--baseline",
            exe,
            "--scenario",
            g,
            "--baseline-scenario",
            s,
            "--seeds",
            "1",
            "--repeats",
            "1",
            "--jobs",
            "1",
        ],
    );
    // find measures the built-in engine's defects: on another engine's
    // scenario it is bad input.
    let find = if e.name == BUILTIN { Ran } else { BadInput };
    m.add(find, &["bench", "find", "--on", s, "--starts", "1", "--cap", "1", "--jobs", "1"]);
    if let Some(own) = own {
        m.add(Ran, &["bench", "find", "--on", s, "--defect", own, "--starts", "1", "--cap", "1", "--guided", "--json"]);
    }
}

/// The cases no engine changes: `list`, the modes that run the built-in
/// engine's scenarios whatever `--scenario` says (`bench suite` first: at
/// some 7 s in a debug build, the costliest case by far), and flags of
/// bench's modes that are bad input.
fn common_cases(m: &mut Matrix<'_>) {
    use Expect::{BadInput, Ran};
    let out = m.file("json");
    m.add(
        Ran,
        &[
            "bench",
            "suite",
            "--seeds",
            "1",
            "--repeats",
            "1",
            "--starts",
            "1",
            "--cap",
            "1",
            "--rss-seeds",
            "1",
            "--rss-early-seeds",
            "1",
            "--jobs",
            "2",
            "--out",
            &out,
        ],
    );
    m.add(Ran, &["list"]);
    m.add(Ran, &["list", "--json"]);
    m.add(
        Ran,
        &["bench", "coverage", "--reference", "1", "--points", "1", "--starts", "1", "--cap", "1", "--jobs", "1"],
    );
    m.add(Ran, &["bench", "coverage", "--reference", "1", "--points", "1", "--starts", "1", "--cap", "1", "--json"]);
    let (save, out) = (m.folder(), m.file("jsonl"));
    m.add(
        Ran,
        &["bench", "false-alarms", "--seeds", "1", "--seed-start", "5", "--save", &save, "--out", &out, "--jobs", "1"],
    );
    let (save, out) = (m.folder(), m.file("jsonl"));
    m.add(
        Ran,
        &[
            "bench",
            "false-alarms",
            "--seeds",
            "1",
            "--seed-start",
            "5",
            "--save",
            &save,
            "--out",
            &out,
            "--guided",
            "--json",
        ],
    );
    m.add(Ran, &["bench", "find", "--starts", "1", "--cap", "1", "--jobs", "2"]);
    m.add(BadInput, &["bench", "compare", "--seeds", "1"]);
    m.add(BadInput, &["bench", "throughput", "--seed-start", "5", "--seeds", "1"]);
    m.add(BadInput, &["bench", "throughput", "--save", "x", "--seeds", "1"]);
    let out = m.file("json");
    m.add(BadInput, &["bench", "suite", "--rss-seeds", "1", "--rss-early-seeds", "2", "--out", &out]);
    m.add(BadInput, &["shrink", corpus(PASS_ENTRY).to_str().expect("a UTF-8 path"), "--budget", "1"]);
    m.add(Ran, &["replay", corpus(PASS_ENTRY).to_str().expect("a UTF-8 path"), "--json"]);
}

/// Runs one case; what is wrong with how it ended, if anything.
fn check(case: &Case, dir: &Path) -> Result<String, String> {
    let args: Vec<&str> = case.args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let out = leasesim_in(dir, &args);
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = format!("cargo sim {}", case.args.join(" "));
    let line = format!("[{secs:5.1} s] exit {:?}: {shown}", out.status.code());
    let Some(code) = out.status.code() else {
        return Err(format!("{line}\n  ended by a signal ({:?}): {stderr}", out.status));
    };
    if code == 101 || stderr.contains("panicked") {
        return Err(format!("{line}\n  PANIC: {stderr}"));
    }
    let expected: &[i32] = match case.expect {
        Expect::Ran => &[0, 1, 3],
        Expect::BadInput => &[2],
    };
    if !expected.contains(&code) {
        return Err(format!("{line}\n  expected {:?} ({expected:?}); stderr: {stderr}", case.expect));
    }
    if case.expect == Expect::BadInput && stderr.trim().lines().count() != 1 {
        return Err(format!("{line}\n  bad input, but not one line on stderr: {stderr}"));
    }
    Ok(line)
}

#[test]
fn every_verb_and_flag_against_every_engine_is_no_panic() {
    let started = Instant::now();
    let scratch = common::Scratch::new("cli-matrix");
    let dir = scratch.path();
    let listed = listed(dir);

    // Every engine the CLI knows has its row here, with a scenario of it.
    let known: BTreeSet<&str> = listed.switches.iter().map(|(name, _)| name.as_str()).collect();
    let covered: BTreeSet<&str> = ENGINES.iter().map(|e| e.name).collect();
    assert_eq!(known, covered, "an engine of `list --json` without its row in ENGINES, or a row of none");
    for e in ENGINES {
        let engine = listed.scenario_engine.iter().find(|(s, _)| s == e.scenario).map(|(_, engine)| engine.as_str());
        assert_eq!(engine, Some(e.name), "{} is not a scenario of {}", e.scenario, e.name);
        assert!(corpus(e.entry).is_file(), "no corpus entry {}", e.entry);
    }

    let mut m = Matrix { dir, next: 0, cases: Vec::new() };
    // The costliest first (bench suite, then the foreign engines' worlds),
    // so the last cases to start are short ones.
    common_cases(&mut m);
    for e in ENGINES.iter().rev() {
        let switches = |name: &str| -> Vec<String> {
            listed.switches.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone()).unwrap_or_default()
        };
        let own = switches(e.name);
        // A switch of another engine that this one does not have.
        let foreign = listed
            .switches
            .iter()
            .filter(|(n, _)| n != e.name)
            .flat_map(|(_, s)| s.iter())
            .find(|s| !own.contains(s))
            .cloned();
        engine_cases(&mut m, e, own.first().map(String::as_str), foreign.as_deref());
    }
    // The built-in engine's corpus entry with its defect switched off: it
    // now passes, and --pin-pass writes the pin.
    let builtin = ENGINES.iter().find(|e| e.name == BUILTIN).expect("the built-in engine's row");
    let now_passes = m.copy(&corpus(builtin.entry), |t| {
        let switched_on = "defects = [\"unfenced-completion\"]";
        assert!(t.contains(switched_on), "{} no longer says {switched_on}", builtin.entry);
        t.replace(switched_on, "defects = []")
    });
    m.add(Expect::Ran, &["replay", &now_passes, "--pin-pass"]);

    let total = m.cases.len();
    let queue = Mutex::new(m.cases.into_iter().collect::<VecDeque<Case>>());
    let problems = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 4);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let Some(case) = queue.lock().expect("the queue").pop_front() else { break };
                match check(&case, dir) {
                    Ok(line) => println!("{line}"),
                    Err(problem) => {
                        println!("{problem}");
                        problems.lock().expect("the problems").push(problem);
                    }
                }
            });
        }
    });
    let problems = problems.into_inner().expect("the problems");
    println!("{total} cases on {threads} threads in {:.1} s", started.elapsed().as_secs_f64());
    assert!(problems.is_empty(), "{} of {total} cases went wrong:\n{}", problems.len(), problems.join("\n"));
}

/// Output into a closed pipe (`cargo sim run --json ... | head -0`) ends the
/// process quietly, whatever engine the run's scenario has.
#[test]
fn run_json_into_a_closed_pipe_is_no_panic_on_any_engine() {
    use std::os::fd::FromRawFd;
    use std::os::unix::process::ExitStatusExt;
    for e in ENGINES {
        let mut fds = [0; 2];
        // SAFETY: `pipe` fills both descriptors; the read end is closed here
        // and the write end owned once, by the child's stdout.
        let write_end = unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0, "pipe");
            libc::close(fds[0]);
            std::os::fd::OwnedFd::from_raw_fd(fds[1])
        };
        let args = ["run", "--scenario", e.scenario, "--seed", "1", "--json"];
        let out = Command::new(EXE)
            .args(args)
            .stdout(std::process::Stdio::from(write_end))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run leasesim")
            .wait_with_output()
            .expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        println!("exit {:?} signal {:?}: cargo sim {}", out.status.code(), out.status.signal(), args.join(" "));
        assert!(!err.contains("panicked"), "{}: panicked on a closed pipe: {err}", e.scenario);
        assert_ne!(out.status.code(), Some(101), "{}: exit 101 (a panic): {err}", e.scenario);
        // Ended by SIGPIPE at its JSON line (or, had the run itself failed,
        // exit 1 with nothing on stdout).
        let quiet = out.status.signal() == Some(libc::SIGPIPE) || matches!(out.status.code(), Some(0..=3));
        assert!(quiet, "{}: neither SIGPIPE nor an exit code: {:?} {err}", e.scenario, out.status);
    }
}
