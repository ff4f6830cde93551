//! The store faults' answers against a real PostgreSQL.
//!
//! A store fault stands for a situation a real database gets into: a write
//! whose statement runs past `statement_timeout` (`txn-timeout`), a write
//! that waits on a row lock past `lock_timeout` (`lock-timeout`), a
//! transaction a concurrent one made unserializable
//! (`serialization-failure`; a deadlock at READ COMMITTED). The harness
//! answers for the store in each (`FaultKind::answer`, then the adapter's
//! `refuse` gives the engine its protocol's or its driver's words), so an
//! engine's handling of each distinct answer is exercised only if the answer
//! is the one the database gives. This test puts a real server in each
//! situation and checks that its SQLSTATE is the one the harness names
//! (`Refusal::sqlstate`, `Refusal::of_sqlstate`), and that every fault that
//! aborts a request answers as the server does in its situation.
//!
//! PostgreSQL starts by itself (the same throwaway cluster as the
//! conformance tests); without server binaries the test says it was
//! skipped, and under `CI` it fails instead.

#[path = "pg/cluster.rs"]
mod cluster;

use leasesim_vocab::faults::FaultKind;
use leasesim_vocab::op::Refusal;
use postgres::Client;
use std::time::Duration;

/// The SQLSTATE of a statement's error (`None`: it succeeded).
fn code(result: Result<u64, postgres::Error>) -> Option<String> {
    result.err().map(|e| e.code().map_or_else(|| format!("no SQLSTATE: {e}"), |c| c.code().to_string()))
}

fn exec(c: &mut Client, sql: &str) -> Option<String> {
    code(c.execute(sql, &[]))
}

/// Runs `sql` and panics unless it succeeds.
fn ok(c: &mut Client, sql: &str) {
    if let Some(code) = exec(c, sql) {
        panic!("store_answers: '{sql}' failed with {code}");
    }
}

/// A write that waits on a row another open transaction holds, past
/// `lock_timeout`; then a statement of the transaction the error ended.
fn lock_wait(a: &mut Client, b: &mut Client) -> (Option<String>, Option<String>) {
    ok(a, "BEGIN");
    ok(a, "SELECT v FROM answers WHERE id = 1 FOR UPDATE");
    ok(b, "BEGIN");
    ok(b, "SET LOCAL lock_timeout = '50ms'");
    let waited = exec(b, "UPDATE answers SET v = v + 1 WHERE id = 1");
    let after = exec(b, "SELECT 1");
    ok(b, "ROLLBACK");
    ok(a, "ROLLBACK");
    (waited, after)
}

/// A write whose statement runs past `statement_timeout`.
fn statement_timeout(b: &mut Client) -> Option<String> {
    ok(b, "SET statement_timeout = '50ms'");
    let timed_out = exec(b, "UPDATE answers SET v = v + 1 + (SELECT 0 FROM pg_sleep(1)) WHERE id = 1");
    ok(b, "RESET statement_timeout");
    timed_out
}

/// A REPEATABLE READ transaction writes a row a concurrent one changed
/// after its snapshot.
fn serialization(a: &mut Client, b: &mut Client) -> Option<String> {
    ok(a, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    ok(a, "SELECT v FROM answers WHERE id = 1");
    ok(b, "UPDATE answers SET v = v + 1 WHERE id = 1");
    let conflict = exec(a, "UPDATE answers SET v = v + 1 WHERE id = 1");
    ok(a, "ROLLBACK");
    conflict
}

/// Two READ COMMITTED transactions each wait for the row the other holds:
/// the server breaks the cycle by aborting one of them.
fn deadlock(a: &mut Client, mut b: Client) -> (Option<String>, Option<String>) {
    ok(a, "BEGIN");
    ok(a, "UPDATE answers SET v = v + 1 WHERE id = 1");
    ok(&mut b, "BEGIN");
    ok(&mut b, "UPDATE answers SET v = v + 1 WHERE id = 2");
    // b waits for row 1 on a thread of its own; a then waits for row 2.
    let waiter = std::thread::spawn(move || {
        let got = exec(&mut b, "UPDATE answers SET v = v + 1 WHERE id = 1");
        ok(&mut b, "ROLLBACK");
        got
    });
    std::thread::sleep(Duration::from_millis(200));
    let mine = exec(a, "UPDATE answers SET v = v + 1 WHERE id = 2");
    ok(a, "ROLLBACK");
    (mine, waiter.join().expect("the waiting session"))
}

/// Each situation's answer, from the server: (the situation, its fault
/// kind if the harness injects it, the refusal the harness names, the
/// SQLSTATE the server gave).
fn provoke(cluster: &mut cluster::Cluster) -> Vec<(&'static str, Option<FaultKind>, Refusal, Option<String>)> {
    let connect =
        |c: &mut cluster::Cluster| c.connect().unwrap_or_else(|e| panic!("store_answers: cannot connect: {e}"));
    let (mut a, mut b) = (connect(cluster), connect(cluster));
    ok(&mut a, "DROP TABLE IF EXISTS answers");
    ok(&mut a, "CREATE TABLE answers (id int PRIMARY KEY, v int NOT NULL)");
    ok(&mut a, "INSERT INTO answers VALUES (1, 0), (2, 0)");
    let (waited, after) = lock_wait(&mut a, &mut b);
    let timed_out = statement_timeout(&mut b);
    let conflict = serialization(&mut a, &mut b);
    let (x, y) = deadlock(&mut a, b);
    // Exactly one of the two is aborted, and the other's statement then runs.
    assert!(x.is_none() != y.is_none(), "store_answers: a deadlock aborts one of its two: {x:?}, {y:?}");
    vec![
        ("a write waits on a row lock past lock_timeout", Some(FaultKind::LockTimeout), Refusal::LockTimeout, waited),
        ("a statement of a transaction an error ended", None, Refusal::TxnClosed, after),
        ("a write runs past statement_timeout", Some(FaultKind::TxnTimeout), Refusal::TimedOut, timed_out),
        (
            "a write of a row changed after the snapshot",
            Some(FaultKind::SerializationFailure),
            Refusal::Conflict,
            conflict,
        ),
        ("two transactions wait for each other", None, Refusal::Deadlock, x.or(y)),
    ]
}

#[test]
fn store_faults_answer_as_postgresql_does() {
    let Some(bindir) = cluster::find_bindir() else {
        assert!(std::env::var_os("CI").is_none(), "no PostgreSQL server binaries ({})", cluster::INSTALL_HINT);
        println!("store_answers: SKIPPED: no PostgreSQL server binaries ({})", cluster::INSTALL_HINT);
        return;
    };
    let mut cluster = cluster::Cluster::start(&bindir).expect("a throwaway cluster");
    let mut wrong = Vec::new();
    for (situation, kind, refusal, got) in provoke(&mut cluster) {
        let named = refusal.sqlstate().map(str::to_string);
        if got != named || Refusal::of_sqlstate(got.as_deref()) != refusal {
            wrong.push(format!("{situation}: the server answered {got:?}, the harness names {named:?} ({refusal:?})"));
        }
        if let Some(kind) = kind {
            if kind.answer() != Some(refusal) {
                wrong
                    .push(format!("{situation}: the fault {kind} answers {:?}, the server {refusal:?}", kind.answer()));
            }
        }
    }
    // Every fault that aborts a request stands for one of the situations.
    let provoked = [FaultKind::LockTimeout, FaultKind::TxnTimeout, FaultKind::SerializationFailure];
    for kind in FaultKind::ALL.into_iter().filter(|k| k.answer().is_some()) {
        if !provoked.contains(&kind) {
            wrong.push(format!("the fault {kind} answers {:?}, but no situation here provokes it", kind.answer()));
        }
    }
    assert!(wrong.is_empty(), "store_answers:\n{}", wrong.join("\n"));
}
