//! Edge values for every field and every flag, generated: each input is
//! refused with one line naming its field (exit 2 through the binary), or
//! accepted, and every acceptance is written down in a reviewed snapshot
//! (`snapshots/edge_values__accepted.snap`). Nothing panics.
//!
//! The fields are not listed by hand: they are every leaf of a pinned corpus
//! entry (its whole inline world and its fault plan) and of every built-in
//! scenario file, so a new field is swept without a test edit.

mod common;

use leasesim_sim::corpus::Entry;
use leasesim_sim::scenario;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// TOML literals at the edges of every type a field can have: the integer
/// boundaries a u32, u64 or i64 field crosses, floats that are not rates,
/// strings that are empty or absurd, and values of the wrong shape.
fn edge_values() -> Vec<String> {
    let mut values: Vec<String> = [
        "0",
        "1",
        "-1",
        "2",
        "999",
        "4294967295",
        "4294967296",
        "9007199254740993",
        "9223372036854775807",
        "-9223372036854775808",
        "0.0",
        "-0.0",
        "0.5",
        "1.0",
        "1.5",
        "-0.5",
        "1e308",
        "nan",
        "inf",
        "-inf",
        "\"\"",
        "\"x\"",
        "\"hung-finalization\"",
        "true",
        "[]",
        "[\"x\"]",
        "[1]",
        "{}",
    ]
    .map(String::from)
    .to_vec();
    values.push(format!("\"{}\"", "x".repeat(100_000)));
    values.extend(PAST_I64.iter().map(|v| v.to_string()));
    values
}

/// Every leaf of `value` as (path, value), paths spelled as the tool's
/// errors spell them (`world.engine.lease_ttl.job_ms`, `plan[0].at_ms`).
fn leaves(prefix: &str, value: &toml::Value, out: &mut Vec<String>) {
    match value {
        toml::Value::Table(table) => {
            for (key, child) in table {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                leaves(&path, child, out);
            }
        }
        toml::Value::Array(items) if items.iter().any(|i| i.is_table()) => {
            for (i, child) in items.iter().enumerate() {
                leaves(&format!("{prefix}[{i}]"), child, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

/// Integers past what TOML holds (i64): written into the text as they are,
/// since no TOML value can carry them.
const PAST_I64: &[&str] = &["9223372036854775808", "18446744073709551616"];

/// `doc` with the leaf at `path` set to `literal` (a TOML value, or one of
/// [`PAST_I64`] written raw).
fn with_leaf(doc: &toml::Table, path: &str, literal: &str) -> String {
    if PAST_I64.contains(&literal) {
        let marked = with_toml_leaf(doc, path, "\"__edge__\"");
        assert_eq!(marked.matches("\"__edge__\"").count(), 1, "{path}: one marker");
        return marked.replace("\"__edge__\"", literal);
    }
    with_toml_leaf(doc, path, literal)
}

fn with_toml_leaf(doc: &toml::Table, path: &str, literal: &str) -> String {
    let value = format!("v = {literal}").parse::<toml::Table>().expect("an edge value is TOML")["v"].clone();
    let mut doc = doc.clone();
    let mut keys: Vec<&str> = path.split('.').collect();
    let last = keys.pop().expect("a path has a field");
    let mut table = &mut doc;
    for key in keys {
        let (name, index) = match key.split_once('[') {
            Some((name, rest)) => (name, Some(rest.trim_end_matches(']').parse::<usize>().expect("an index"))),
            None => (key, None),
        };
        let entry = table.get_mut(name).expect("the path exists");
        table = match index {
            Some(i) => entry.as_array_mut().expect("an array")[i].as_table_mut().expect("a table"),
            None => entry.as_table_mut().expect("a table"),
        };
    }
    table.insert(last.to_string(), value);
    toml::to_string(&doc).expect("serializes")
}

/// What one input did: accepted, or refused with this message. A panic is
/// a failure of the test, never an outcome.
fn judge(parse: &dyn Fn(&str) -> Result<(), String>, text: &str, what: &str) -> Result<(), String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse(text))) {
        Ok(result) => result,
        Err(_) => panic!("{what}: panicked"),
    }
}

/// The one check of the sweep: every edge value of every leaf of `base` is
/// refused naming the leaf, or accepted; the acceptances go to `accepted`.
/// Returns the number of inputs tried.
fn sweep(
    label: &str,
    base: &str,
    parse: &dyn Fn(&str) -> Result<(), String>,
    accepted: &mut BTreeMap<String, Vec<String>>,
    problems: &mut Vec<String>,
) -> usize {
    let doc: toml::Table = base.parse().expect("the base is TOML");
    parse(base).unwrap_or_else(|e| panic!("{label}: the base input is refused: {e}"));
    let mut paths = Vec::new();
    leaves("", &toml::Value::Table(doc.clone()), &mut paths);
    let mut tried = 0;
    for path in &paths {
        for literal in edge_values() {
            tried += 1;
            let what = format!("{label}: {path} = {}", shorten(&literal));
            match judge(parse, &with_leaf(&doc, path, &literal), &what) {
                Ok(()) => accepted.entry(format!("{label}: {path}")).or_default().push(shorten(&literal)),
                Err(e) if e.contains('\n') => problems.push(format!("{what}: the error is not one line: {e}")),
                Err(e) if !names_field(&e, path) => {
                    problems.push(format!("{what}: the error does not name `{path}`: {e}"))
                }
                Err(_) => {}
            }
        }
    }
    tried
}

/// Does error `e` name the field at `path`? A value of the wrong type names
/// it as serde saw it; a value out of range names it as validation does (a
/// world's fields with or without their `world.` prefix).
fn names_field(e: &str, path: &str) -> bool {
    let short = path.strip_prefix("world.").unwrap_or(path);
    e.contains(path) || e.contains(short)
}

fn shorten(literal: &str) -> String {
    if literal.len() > 24 {
        format!("{}… ({} chars)", &literal[..12], literal.len())
    } else {
        literal.to_string()
    }
}

/// A corpus entry with everything an entry can hold: a pinned world inline
/// and an explicit plan of several events.
fn entry_base() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus/b-machines-fenced-completion-unfenced-completion-seed10-shrunk.toml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn parse_entry(text: &str) -> Result<(), String> {
    let entry = Entry::parse(text, &leasesim_sim::engines())?;
    entry.spec(Path::new("edge.toml"), &leasesim_sim::engines()).map(|_| ())
}

fn parse_scenario(text: &str) -> Result<(), String> {
    scenario::parse_with(text, &leasesim_sim::engines()).map(|_| ())
}

#[test]
fn every_field_at_its_edges() {
    let mut accepted = BTreeMap::new();
    let mut problems = Vec::new();
    let mut tried = sweep("entry", &entry_base(), &parse_entry, &mut accepted, &mut problems);
    for name in scenario::builtin_names() {
        let file = scenario::builtin_dir().join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&file).expect("a built-in scenario is readable");
        tried += sweep(&name, &text, &parse_scenario, &mut accepted, &mut problems);
    }
    assert!(tried >= 1000, "only {tried} inputs");
    assert!(problems.is_empty(), "{} of {tried} inputs:\n{}", problems.len(), problems.join("\n"));
    let mut table = String::new();
    for (field, values) in &accepted {
        writeln!(table, "{field}: {}", values.join(" ")).expect("write to a string");
    }
    insta::assert_snapshot!("accepted", table);
}

// ---------------------------------------------------------------------------
// Flags
// ---------------------------------------------------------------------------

/// Values of a flag that no command accepts: not a number, negative,
/// fractional, past u64, empty.
const BAD_NUMBERS: &[&str] = &["", "x", "-1", "1.5", "18446744073709551616", "99999999999999999999999", " 1", "0x10"];

/// A failing entry (shrink refuses a passing one before looking at flags).
const FAILING: &str = "corpus/a-index-builds-no-permit-leak-unbounded-finalize-seed2-shrunk.toml";

/// Paths no output flag may write to: nothing, a device, a directory.
const BAD_OUTPUTS: &[&str] = &["", "/dev/null", "/", "/proc/self/status"];

/// (command line before the flag, the flag, the values refused). Each
/// combination is run through the binary; it must exit 2 with one line
/// naming the flag, before any run.
fn flag_cases() -> Vec<(Vec<&'static str>, &'static str, Vec<&'static str>)> {
    let numbers = |extra: &[&'static str]| BAD_NUMBERS.iter().chain(extra).copied().collect::<Vec<_>>();
    let outputs = |extra: &[&'static str]| BAD_OUTPUTS.iter().chain(extra).copied().collect::<Vec<_>>();
    // Accepted, and so not here: `--shard 2/18446744073709551615` (shard 2
    // of that many is the seeds s with s % N == 1: seed 1 of `--seeds 1`).
    let run = vec!["run", "--scenario", "swarm", "--seed", "1"];
    let fuzz = vec!["fuzz", "--scenario", "swarm", "--seeds", "1"];
    // The SVG is never written: each input is refused before the run.
    let svg = vec!["run", "--scenario", "swarm", "--seed", "1", "--svg", "/tmp/leasesim-edge-never-written.svg"];
    let svg_from = [svg.as_slice(), &["--from", "2s"]].concat();
    let replay = vec!["replay", "corpus/swarm-pass-seed1.toml"];
    let find = vec!["bench", "find", "--starts", "1"];
    vec![
        (vec!["run", "--scenario", "swarm"], "--seed", numbers(&[])),
        (run.clone(), "--faults", vec!["", "nope", "Swarm", "1"]),
        (run.clone(), "--defect", vec!["", "nope", "unfenced_completion", "1"]),
        (run.clone(), "--trace", outputs(&[])),
        (run.clone(), "--svg", outputs(&[])),
        (run.clone(), "--history", outputs(&[])),
        (svg.clone(), "--from", numbers(&["1.5s", "2h", "-1s", "99999999999999m"])),
        (svg_from.clone(), "--to", numbers(&["1s", "2s", "1999ms"])),
        (vec!["fuzz", "--scenario", "swarm"], "--seeds", numbers(&["0"])),
        (fuzz.clone(), "--jobs", numbers(&["0", "100000", "18446744073709551615"])),
        (fuzz.clone(), "--shard", numbers(&["0/2", "3/2", "1/0", "0/0", "a/b", "1/2/3", "-1/2"])),
        (fuzz.clone(), "--seed-start", numbers(&["18446744073709551615"])),
        (
            vec!["fuzz", "--scenario", "swarm"],
            "--time",
            numbers(&["0s", "-1s", "5 minutes", "99999999999999999999s", "31d", "s"]),
        ),
        (fuzz.clone(), "--faults", vec!["", "nope"]),
        (fuzz.clone(), "--defect", vec!["", "nope"]),
        (fuzz.clone(), "--save", vec!["", "/dev/null", "/proc/leasesim-cannot-write", "corpus/swarm-pass-seed1.toml"]),
        (replay.clone(), "--trace", outputs(&[])),
        (replay.clone(), "--svg", outputs(&[])),
        (replay.clone(), "--history", outputs(&[])),
        (vec!["shrink", FAILING], "--budget", numbers(&["0"])),
        (
            vec!["shrink", FAILING],
            "--out",
            vec!["", "/dev/null", "/proc/self", "corpus/swarm-pass-seed1.toml", "/nonexistent"],
        ),
        (find.clone(), "--jobs", numbers(&["0", "100000"])),
        (vec!["bench", "find"], "--starts", numbers(&["0"])),
        (find.clone(), "--cap", numbers(&["0"])),
        (find.clone(), "--on", vec!["", "nope"]),
        (vec!["bench", "throughput"], "--seeds", numbers(&["0"])),
        (vec!["bench", "throughput", "--seeds", "1"], "--repeats", numbers(&["0"])),
        (vec!["bench", "suite"], "--out", outputs(&[])),
    ]
}

/// Runs the binary from the repository root; an input it accepts by mistake
/// would start a campaign, so one that runs past 30 s is killed and
/// reported as exit -1.
fn leasesim(args: &[&str]) -> (i32, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasesim"))
        .args(args)
        .current_dir(root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run leasesim");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait for leasesim") {
            break status.code().unwrap_or(-1);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break -1;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut err).expect("read stderr");
    (code, err)
}

#[test]
fn every_flag_at_its_edges() {
    let mut tried = 0;
    let mut problems = Vec::new();
    for (prefix, flag, values) in flag_cases() {
        for value in values {
            let mut args = prefix.clone();
            args.push(flag);
            args.push(value);
            let (code, err) = leasesim(&args);
            tried += 1;
            let err = err.trim_end();
            if err.contains("panicked") || code != 2 || err.lines().count() != 1 || !err.contains(flag) {
                problems.push(format!("{args:?}: exit {code}: {err}"));
            }
        }
    }
    assert!(problems.is_empty(), "{} of {tried} inputs:\n{}", problems.len(), problems.join("\n"));
    assert!(tried >= 100, "only {tried} flag inputs");
}
