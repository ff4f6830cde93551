//! The model's unit tests: each case is a script of steps (a graphile call on
//! a session, BEGIN, COMMIT, ROLLBACK, a clock step) with what each answers,
//! and what the committed jobs look like at the end. One function checks them all.

use chrono::{DateTime, Duration, TimeZone, Utc};
use graphile_worker_job_spec::{JobKeyMode, JobSpec};
use leasesim_graphile_model::calls::{Call, JobRef};
use leasesim_graphile_model::{Db, DbCell, Exec, JobRow, Output, SessionId};
use serde_json::json;

const SCHEMA: &str = "graphile_worker";

/// What a step must answer.
#[derive(Debug, Clone, PartialEq)]
enum Want {
    /// Any successful answer.
    Ok,
    Rows(usize),
    Affected(u64),
    /// The first row's column, as Debug text of its cell.
    Cell(&'static str, &'static str),
    Blocked(SessionId),
    Error(&'static str),
}

enum Step {
    Call(SessionId, Call, Want),
    /// A raw statement text, for what graphile never sends.
    Raw(SessionId, &'static str, Want),
    Begin(SessionId),
    Commit(SessionId),
    Rollback(SessionId),
    /// Advances the clock by milliseconds.
    Tick(i64),
}

/// What must hold of the committed jobs at the end.
type JobCheck = fn(&[JobRow]) -> Result<(), String>;

struct Case {
    name: &'static str,
    steps: Vec<Step>,
    jobs: JobCheck,
    unmodelled: usize,
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap()
}

fn answer_matches(want: &Want, got: &Exec) -> bool {
    match (want, got) {
        (Want::Blocked(h), Exec::Blocked { holder }) => h == holder,
        (Want::Ok, Exec::Done(Ok(_))) => true,
        (Want::Rows(n), Exec::Done(Ok(Output::Rows(rows)))) => rows.len() == *n,
        (Want::Affected(n), Exec::Done(Ok(Output::Affected(m)))) => n == m,
        (Want::Cell(col, text), Exec::Done(Ok(Output::Rows(rows)))) => {
            rows.first().and_then(|r| r.get(col)).is_some_and(|c| format!("{c:?}") == *text)
        }
        (Want::Error(code), Exec::Done(Err(e))) => e.code() == Some(code),
        _ => false,
    }
}

/// The one check: runs a case's steps on a fresh model, every answer as wanted.
fn check(case: &Case) {
    let mut db = Db::new(SCHEMA);
    let mut now = t0();
    for (i, step) in case.steps.iter().enumerate() {
        let (session, statements, want): (SessionId, Vec<_>, &Want) = match step {
            Step::Call(s, call, want) => (*s, call.statements(SCHEMA), want),
            Step::Raw(s, sql, want) => (*s, vec![(sql.to_string(), Default::default())], want),
            Step::Begin(s) => {
                db.begin(*s, now).unwrap();
                continue;
            }
            Step::Commit(s) => {
                db.commit(*s).unwrap();
                continue;
            }
            Step::Rollback(s) => {
                db.rollback(*s);
                continue;
            }
            Step::Tick(ms) => {
                now += Duration::milliseconds(*ms);
                continue;
            }
        };
        // A call that sends several statements: the last one answers.
        let mut last = None;
        for (sql, params) in statements {
            last = Some(db.execute(session, &sql, &params, now));
        }
        let got = last.expect("the call sent a statement");
        assert!(answer_matches(want, &got), "{}: step {i}: wanted {want:?}, got {got:?}", case.name);
    }
    let jobs: Vec<JobRow> = db.jobs().cloned().collect();
    if let Err(e) = (case.jobs)(&jobs) {
        panic!("{}: committed jobs: {e}\n{jobs:#?}", case.name);
    }
    assert_eq!(db.unmodelled().len(), case.unmodelled, "{}: unmodelled {:?}", case.name, db.unmodelled());
}

fn register() -> Step {
    Step::Call(0, Call::RegisterTasks(vec!["t".into()]), Want::Rows(1))
}

fn add(spec: JobSpec) -> Call {
    Call::AddJob { identifier: "t".into(), payload: json!({}), spec }
}

fn claim(worker: &str) -> Call {
    Call::GetJob {
        worker: worker.into(),
        task_ids: vec![1],
        forbidden: vec![],
        accepted: vec![],
        allowlist: None,
        local_now: None,
    }
}

fn keyed(key: &str, mode: Option<JobKeyMode>) -> JobSpec {
    JobSpec { job_key: Some(key.into()), job_key_mode: mode, ..JobSpec::default() }
}

fn queued(queue: &str) -> JobSpec {
    JobSpec { queue_name: Some(queue.into()), ..JobSpec::default() }
}

fn job(id: i64) -> JobRef {
    JobRef { id, queued: false }
}

fn expect(cond: bool, what: &str) -> Result<(), String> {
    cond.then_some(()).ok_or_else(|| what.to_string())
}

fn claims() -> Vec<Case> {
    vec![
        Case {
            name: "claim, complete",
            steps: vec![
                register(),
                Step::Call(0, add(JobSpec::default()), Want::Cell("id", "I64(1)")),
                Step::Call(1, claim("w1"), Want::Cell("locked_by", "Text(\"w1\")")),
                Step::Call(1, claim("w2"), Want::Rows(0)),
                Step::Call(1, Call::CompleteJob { job: job(1), worker: "w1".into() }, Want::Affected(1)),
            ],
            jobs: |jobs| expect(jobs.is_empty(), "the job is gone"),
            unmodelled: 0,
        },
        Case {
            name: "a failure backs off by exp(attempts) seconds, rounded like rint",
            steps: vec![
                register(),
                Step::Call(0, add(JobSpec::default()), Want::Ok),
                Step::Call(1, claim("w1"), Want::Rows(1)),
                Step::Call(
                    1,
                    Call::FailJob { job: job(1), worker: "w1".into(), message: "e".into(), replacement: None },
                    Want::Affected(1),
                ),
            ],
            // exp(1) s = 2.718281828459045 s -> 2,718,282 µs after greatest(now, run_at).
            jobs: |jobs| {
                expect(jobs[0].run_at == t0() + Duration::microseconds(2_718_282), "run_at = now + 2.718282 s")?;
                expect(
                    jobs[0].locked_by.is_none() && jobs[0].last_error.as_deref() == Some("e"),
                    "released, error kept",
                )
            },
            unmodelled: 0,
        },
        Case {
            name: "a stale failure by a worker that no longer holds the job changes nothing",
            steps: vec![
                register(),
                Step::Call(0, add(JobSpec::default()), Want::Ok),
                Step::Call(1, claim("w1"), Want::Rows(1)),
                Step::Call(
                    2,
                    Call::FailJob { job: job(1), worker: "w2".into(), message: "e".into(), replacement: None },
                    Want::Affected(0),
                ),
            ],
            jobs: |jobs| expect(jobs[0].locked_by.as_deref() == Some("w1"), "still w1's"),
            unmodelled: 0,
        },
    ]
}

fn releases() -> Vec<Case> {
    vec![
        Case {
            name: "a named queue is locked with its job, released by its completion",
            steps: vec![
                register(),
                Step::Call(0, add(queued("q")), Want::Ok),
                Step::Call(0, add(queued("q")), Want::Ok),
                Step::Call(1, claim("w1"), Want::Cell("id", "I64(1)")),
                Step::Call(2, claim("w2"), Want::Rows(0)),
                Step::Call(
                    1,
                    Call::CompleteJob { job: JobRef { id: 1, queued: true }, worker: "w1".into() },
                    Want::Affected(1),
                ),
                Step::Call(2, claim("w2"), Want::Cell("id", "I64(2)")),
            ],
            jobs: |jobs| expect(jobs.len() == 1 && jobs[0].locked_by.as_deref() == Some("w2"), "job 2 is w2's"),
            unmodelled: 0,
        },
        Case {
            name: "claims skip a job an open sweep transaction holds; its failure waits",
            steps: vec![
                register(),
                Step::Call(0, add(JobSpec::default()), Want::Ok),
                Step::Call(1, claim("w1"), Want::Rows(1)),
                Step::Begin(3),
                Step::Call(
                    3,
                    Call::RecoverDeadWorkerJobs { workers: vec!["w1".into()], delay_ms: 0 },
                    Want::Cell("recovered_count", "I32(1)"),
                ),
                Step::Call(2, claim("w2"), Want::Rows(0)),
                Step::Call(
                    1,
                    Call::FailJob { job: job(1), worker: "w1".into(), message: "e".into(), replacement: None },
                    Want::Blocked(3),
                ),
                Step::Commit(3),
                // The retry finds the job recovered: w1 no longer holds it.
                Step::Call(
                    1,
                    Call::FailJob { job: job(1), worker: "w1".into(), message: "e".into(), replacement: None },
                    Want::Affected(0),
                ),
                Step::Call(2, claim("w2"), Want::Cell("attempts", "I16(1)")),
            ],
            jobs: |jobs| expect(jobs[0].locked_by.as_deref() == Some("w2"), "w2 claimed the recovered job"),
            unmodelled: 0,
        },
        Case {
            name: "a stale completion deletes a job another worker holds (graphile's SQL has no owner check)",
            steps: vec![
                register(),
                Step::Call(0, add(JobSpec::default()), Want::Ok),
                Step::Call(1, claim("w1"), Want::Rows(1)),
                Step::Call(2, Call::CompleteJob { job: job(1), worker: "w2".into() }, Want::Affected(1)),
            ],
            jobs: |jobs| expect(jobs.is_empty(), "deleted"),
            unmodelled: 0,
        },
    ]
}

fn keys_and_ids() -> Vec<Case> {
    vec![
        Case {
            name: "replacing the key of a running job retires it and adds a new one",
            steps: vec![
                register(),
                Step::Call(0, add(keyed("k", None)), Want::Ok),
                Step::Call(1, claim("w1"), Want::Rows(1)),
                Step::Call(0, add(keyed("k", None)), Want::Cell("id", "I64(2)")),
                Step::Call(1, Call::ReturnJobs { worker: "w1".into(), jobs: vec![job(1)] }, Want::Affected(1)),
            ],
            // The retired job keeps its exhausted attempts when it is returned.
            jobs: |jobs| {
                expect(jobs.len() == 2, "two jobs")?;
                expect(jobs[0].key.is_none() && jobs[0].attempts == jobs[0].max_attempts, "job 1 retired")?;
                expect(jobs[1].key.as_deref() == Some("k"), "job 2 has the key")
            },
            unmodelled: 0,
        },
        Case {
            name: "preserve_run_at keeps the first run_at; unsafe_dedupe only bumps the revision",
            steps: vec![
                register(),
                Step::Call(0, add(JobSpec { run_at: Some(t0() + Duration::hours(1)), ..keyed("k", None) }), Want::Ok),
                Step::Call(0, add(keyed("k", Some(JobKeyMode::PreserveRunAt))), Want::Cell("revision", "I32(1)")),
                Step::Call(0, add(keyed("k", Some(JobKeyMode::UnsafeDedupe))), Want::Cell("revision", "I32(2)")),
            ],
            jobs: |jobs| {
                expect(jobs.len() == 1 && jobs[0].run_at == t0() + Duration::hours(1), "one job, first run_at")
            },
            unmodelled: 0,
        },
        Case {
            name: "a rolled-back insert still consumes its id",
            steps: vec![
                register(),
                Step::Begin(1),
                Step::Call(1, add(JobSpec::default()), Want::Cell("id", "I64(1)")),
                Step::Rollback(1),
                Step::Call(0, add(JobSpec::default()), Want::Cell("id", "I64(2)")),
            ],
            jobs: |jobs| expect(jobs.len() == 1 && jobs[0].id == 2, "only job 2"),
            unmodelled: 0,
        },
    ]
}

fn sweeps() -> Vec<Case> {
    vec![
        Case {
            name: "two batches on one key in one statement: cannot affect a row twice",
            steps: vec![
                register(),
                Step::Call(
                    0,
                    Call::AddJobs {
                        jobs: vec![
                            ("t".into(), json!({}), keyed("k", None)),
                            ("t".into(), json!({}), keyed("k", None)),
                        ],
                        preserve_run_at: false,
                    },
                    Want::Error("21000"),
                ),
                Step::Call(0, add(JobSpec::default()), Want::Cell("id", "I64(3)")),
            ],
            jobs: |jobs| expect(jobs.len() == 1, "the failed batch left nothing"),
            unmodelled: 0,
        },
        Case {
            name: "the sweep lock is one transaction's; another's try answers false",
            steps: vec![
                Step::Begin(1),
                Step::Call(1, Call::TrySweepLock, Want::Cell("acquired", "Bool(true)")),
                Step::Call(2, Call::TrySweepLock, Want::Cell("acquired", "Bool(false)")),
                Step::Commit(1),
                Step::Call(2, Call::TrySweepLock, Want::Cell("acquired", "Bool(true)")),
            ],
            jobs: |_| Ok(()),
            unmodelled: 0,
        },
        Case {
            name: "stale and orphan workers at the threshold's edge",
            steps: vec![
                register(),
                Step::Call(1, Call::Heartbeat { worker: "w1".into(), metadata: None }, Want::Affected(1)),
                Step::Call(0, add(JobSpec::default()), Want::Ok),
                Step::Call(2, claim("orphan"), Want::Rows(1)),
                Step::Tick(1_000),
                // last_heartbeat_at < now() - 1 s is false at exactly 1 s.
                Step::Call(0, Call::ListStaleWorkers { threshold_ms: 1_000 }, Want::Rows(0)),
                Step::Call(0, Call::ListOrphanLockedWorkers { threshold_ms: 1_000 }, Want::Rows(0)),
                Step::Tick(1),
                Step::Call(0, Call::ListStaleWorkers { threshold_ms: 1_000 }, Want::Cell("worker_id", "Text(\"w1\")")),
                Step::Call(
                    0,
                    Call::ListOrphanLockedWorkers { threshold_ms: 1_000 },
                    Want::Cell("worker_id", "Text(\"orphan\")"),
                ),
            ],
            jobs: |_| Ok(()),
            unmodelled: 0,
        },
    ]
}

fn transactions() -> Vec<Case> {
    vec![
        Case {
            name: "two transactions locking each other's rows: the second wait is a deadlock",
            steps: vec![
                register(),
                Step::Call(0, add(JobSpec::default()), Want::Ok),
                Step::Call(0, add(JobSpec::default()), Want::Ok),
                Step::Begin(1),
                Step::Begin(2),
                Step::Call(1, Call::PermanentlyFailJobs { ids: vec![1], reason: "r".into() }, Want::Rows(1)),
                Step::Call(2, Call::PermanentlyFailJobs { ids: vec![2], reason: "r".into() }, Want::Rows(1)),
                Step::Call(1, Call::CompleteJobs { ids: vec![2] }, Want::Blocked(2)),
                Step::Call(2, Call::CompleteJobs { ids: vec![1] }, Want::Error("40P01")),
                // Session 2's transaction failed: its locks are gone, session 1 goes on.
                Step::Call(1, Call::CompleteJobs { ids: vec![2] }, Want::Rows(1)),
                Step::Commit(1),
            ],
            jobs: |jobs| {
                expect(
                    jobs.len() == 1 && jobs[0].id == 1 && jobs[0].last_error.as_deref() == Some("r"),
                    "job 1 failed, job 2 gone",
                )
            },
            unmodelled: 0,
        },
        Case {
            name: "a failed transaction block refuses statements until it ends",
            steps: vec![
                register(),
                Step::Begin(1),
                Step::Call(1, add(JobSpec { max_attempts: Some(0), ..JobSpec::default() }), Want::Error("23514")),
                Step::Call(1, add(JobSpec::default()), Want::Error("25P02")),
                Step::Commit(1),
                Step::Call(1, add(JobSpec::default()), Want::Cell("id", "I64(2)")),
            ],
            jobs: |jobs| expect(jobs.len() == 1, "one job"),
            unmodelled: 0,
        },
        Case {
            name: "an unmodelled statement is refused and recorded",
            steps: vec![Step::Raw(1, "select 42", Want::Error("0A000")), Step::Raw(1, "  BEGIN ", Want::Ok)],
            jobs: |_| Ok(()),
            unmodelled: 1,
        },
    ]
}

fn refusals_and_cleanup() -> Vec<Case> {
    vec![
        Case {
            name: "remove_job of a running job retires it; reschedule revives it",
            steps: vec![
                register(),
                Step::Call(0, add(keyed("k", None)), Want::Ok),
                Step::Call(1, claim("w1"), Want::Rows(1)),
                Step::Call(0, Call::RemoveJob { key: "k".into() }, Want::Affected(1)),
                Step::Call(1, Call::ReturnJobs { worker: "w1".into(), jobs: vec![job(1)] }, Want::Affected(1)),
                Step::Call(
                    0,
                    Call::RescheduleJobs {
                        ids: vec![1],
                        run_at: None,
                        priority: None,
                        attempts: Some(0),
                        max_attempts: None,
                    },
                    Want::Rows(1),
                ),
                Step::Call(2, claim("w2"), Want::Rows(1)),
            ],
            jobs: |jobs| expect(jobs[0].key.is_none() && jobs[0].attempts == 1, "revived and claimed"),
            unmodelled: 0,
        },
        Case {
            name: "a cleanup's table lock makes claims wait",
            steps: vec![
                register(),
                Step::Begin(1),
                Step::Call(1, Call::CleanupJobQueues, Want::Affected(0)),
                Step::Call(2, claim("w2"), Want::Blocked(1)),
                Step::Commit(1),
                Step::Call(2, claim("w2"), Want::Rows(0)),
            ],
            jobs: |_| Ok(()),
            unmodelled: 0,
        },
    ]
}

fn waits() -> Vec<Case> {
    let dedupe = || add(keyed("k", Some(JobKeyMode::UnsafeDedupe)));
    vec![
        Case {
            name: "an insert that waits for a key keeps the id it drew, across every retry",
            steps: vec![
                register(),
                Step::Call(0, add(keyed("k", None)), Want::Cell("id", "I64(1)")),
                Step::Begin(3),
                Step::Call(3, Call::CompleteJob { job: job(1), worker: "w".into() }, Want::Affected(1)),
                Step::Call(0, dedupe(), Want::Blocked(3)),
                Step::Call(0, dedupe(), Want::Blocked(3)),
                Step::Commit(3),
                Step::Call(0, dedupe(), Want::Cell("id", "I64(2)")),
            ],
            jobs: |jobs| expect(jobs.len() == 1 && jobs[0].id == 2, "job 2 holds the key"),
            unmodelled: 0,
        },
        Case {
            name: "remove_job that waited in its UPDATE resumes there, also after an early retry",
            steps: vec![
                register(),
                Step::Call(0, add(keyed("k", None)), Want::Ok),
                Step::Call(1, claim("w1"), Want::Rows(1)),
                Step::Begin(3),
                Step::Call(3, Call::RecoverDeadWorkerJobs { workers: vec!["w1".into()], delay_ms: 0 }, Want::Ok),
                Step::Call(0, Call::RemoveJob { key: "k".into() }, Want::Blocked(3)),
                Step::Call(0, Call::RemoveJob { key: "k".into() }, Want::Blocked(3)),
                Step::Commit(3),
                // Its DELETE saw the job locked: the retry only runs the UPDATE.
                Step::Call(0, Call::RemoveJob { key: "k".into() }, Want::Affected(1)),
            ],
            jobs: |jobs| expect(jobs.len() == 1 && jobs[0].key.is_none() && jobs[0].attempts == 25, "kept and retired"),
            unmodelled: 0,
        },
        Case {
            name: "a statement that waited keeps its snapshot: jobs committed meanwhile stay unseen",
            steps: vec![
                register(),
                Step::Call(0, add(JobSpec::default()), Want::Ok),
                Step::Begin(1),
                Step::Call(1, Call::CompleteJob { job: job(1), worker: "w".into() }, Want::Affected(1)),
                Step::Call(2, Call::CompleteJobs { ids: vec![2, 1] }, Want::Blocked(1)),
                Step::Call(1, add(JobSpec::default()), Want::Cell("id", "I64(2)")),
                Step::Commit(1),
                Step::Call(2, Call::CompleteJobs { ids: vec![2, 1] }, Want::Rows(0)),
            ],
            jobs: |jobs| expect(jobs.len() == 1 && jobs[0].id == 2, "job 2 was not seen, so not completed"),
            unmodelled: 0,
        },
    ]
}

fn cases() -> Vec<Case> {
    [claims(), releases(), keys_and_ids(), sweeps(), transactions(), refusals_and_cleanup(), waits()]
        .into_iter()
        .flatten()
        .collect()
}

#[test]
fn model_cases() {
    for case in cases() {
        check(&case);
    }
}

#[test]
fn claimed_rows_repeat_the_claim_ctes_columns() {
    let mut db = Db::new(SCHEMA);
    for (sql, params) in Call::RegisterTasks(vec!["t".into()]).statements(SCHEMA) {
        db.execute(0, &sql, &params, t0());
    }
    for (sql, params) in add(JobSpec::default()).statements(SCHEMA) {
        db.execute(0, &sql, &params, t0());
    }
    let (sql, params) = claim("w").statements(SCHEMA).remove(0);
    let Exec::Done(Ok(Output::Rows(rows))) = db.execute(0, &sql, &params, t0()) else { panic!("a claim") };
    let names: Vec<&str> = rows[0].columns().iter().map(|(n, _)| *n).collect();
    assert_eq!(names.len(), 21, "{names:?}");
    assert!(matches!(rows[0].get("id"), Some(DbCell::I64(1))));
    assert!(rows[0].to_db_row().try_get::<i64>("id").is_ok());
}

#[test]
fn change_log_names_what_each_commit_changed() {
    let mut db = Db::new(SCHEMA);
    for call in [Call::RegisterTasks(vec!["t".into()]), add(queued("q"))] {
        for (sql, params) in call.statements(SCHEMA) {
            db.execute(0, &sql, &params, t0());
        }
    }
    let changes: Vec<_> = db.changes_since(0).cloned().collect();
    assert_eq!(changes.len(), 2);
    assert_eq!(changes[1].jobs, vec![1]);
    assert_eq!(changes[1].queues, vec![1]);
    assert_eq!(db.changes_since(1).count(), 1);
    assert_eq!(db.changes_since(db.version()).count(), 0);
}
