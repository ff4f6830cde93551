//! leasesim's graphile model against a real PostgreSQL running graphile's own
//! migrations: generated sequences of graphile's own statements (produced by
//! graphile's builders) over several sessions, some inside transactions left
//! open across other sessions' statements, applied to both; every answer and,
//! after every step, every committed row compared.
//!
//! PostgreSQL's clock is the test's: `public.now()` reads the setting
//! `leasesim.now`, and every session runs with `search_path = gw, public,
//! pg_catalog`, so the unqualified `now()` of graphile's SQL, of its function
//! bodies and of its column defaults (bound when the migrations ran) is it.
//!
//! Without hash and merge joins, PostgreSQL's plan for add_jobs' `INSERT ..
//! SELECT` proposes the rows (and draws their ids) in the specs' order, as
//! the model does; with them, the order follows the plan (see DESIGN.md).
//!
//! `PROPTEST_CASES` (default 300) and `PROPTEST_RNG_SEED` (default fixed)
//! choose the sequences; a failure is shrunk and its seed kept in
//! `tests/graphile_conformance.proptest-regressions`, replayed first by every run.

use std::cell::RefCell;
use std::time::Instant;

use chrono::{TimeZone, Utc};
use futures::executor::block_on;
use graphile_worker_database::Database;
mod graphile;

use graphile::cluster::{find_bindir, Cluster, INSTALL_HINT};
use graphile::gen::{self, SESSIONS};
use graphile::pg::{Session, SyncDriver};
use graphile::world::{Counts, World, SCHEMA};
use leasesim_graphile_model::Ts;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed, TestCaseError, TestRunner};

const DEFAULT_CASES: u32 = 300;
const DEFAULT_SEED: u64 = 0x6772_6170_6869_6c65;

fn start_time() -> Ts {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().expect("a valid time")
}

/// The clock function and the database-wide settings every session gets.
fn prepare(cluster: &mut Cluster) -> Result<(), String> {
    let mut admin = cluster.connect()?;
    let sql = format!(
        "create function public.now() returns timestamptz language sql stable cost 1 \
           as $$ select current_setting('leasesim.now')::timestamptz $$;
         alter database postgres set search_path = {SCHEMA}, public, pg_catalog;
         alter database postgres set leasesim.now = '2000-01-01 00:00:00+00';
         alter database postgres set enable_hashjoin = off;
         alter database postgres set enable_mergejoin = off;"
    );
    admin.batch_execute(&sql).map_err(|e| format!("prepare: {e}"))
}

/// graphile's own migrations, through graphile's own runner.
fn migrate(cluster: &mut Cluster) -> Result<(), String> {
    let client = cluster.connect()?;
    let driver = SyncDriver::new(client);
    block_on(graphile_worker_migrations::migrate(Database::new(driver), SCHEMA)).map_err(|e| format!("migrate: {e}"))
}

/// The clock really is the setting, in statements, column defaults and function bodies.
fn check_clock(cluster: &mut Cluster) -> Result<(), String> {
    let mut c = cluster.connect()?;
    let sql = format!(
        "begin; select set_config('leasesim.now', '2031-05-06 07:08:09.123456+00', true);
         select {SCHEMA}.add_job('clock_check');"
    );
    c.batch_execute(&sql).map_err(|e| e.to_string())?;
    let row = c
        .query_one(&format!("select created_at::text, run_at::text, now()::text from {SCHEMA}._private_jobs"), &[])
        .map_err(|e| e.to_string())?;
    c.batch_execute("rollback").map_err(|e| e.to_string())?;
    let (created, run_at, now): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    let want = "2031-05-06 07:08:09.123456+00";
    if created != want || run_at != want || now != want {
        return Err(format!(
            "PostgreSQL's now() is not the test's clock: created_at {created}, run_at {run_at}, now {now}"
        ));
    }
    Ok(())
}

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES);
    let seed = std::env::var("PROPTEST_RNG_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_SEED);
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../../tests/graphile_conformance.proptest-regressions"
        )))),
        max_shrink_iters: 400,
        ..Config::default()
    }
}

fn run_case(world: &mut World, ops: &[gen::Op], server_version: &str) -> Result<(), String> {
    world.reset(server_version, start_time())?;
    for (i, op) in ops.iter().enumerate() {
        gen::apply(world, op).map_err(|e| format!("step {i} ({op:?}): {e}"))?;
        world.compare_tables().map_err(|e| format!("after step {i} ({op:?}): committed rows differ: {e}"))?;
    }
    Ok(())
}

#[test]
fn graphile_model_answers_like_postgresql() {
    let Some(bindir) = find_bindir() else {
        assert!(std::env::var_os("CI").is_none(), "no PostgreSQL server binaries ({INSTALL_HINT})");
        println!("gw_conformance: SKIPPED: no PostgreSQL server binaries ({INSTALL_HINT})");
        return;
    };
    let started = Instant::now();
    let mut cluster = Cluster::start(&bindir).expect("a throwaway cluster");
    prepare(&mut cluster).expect("the clock function");
    migrate(&mut cluster).expect("graphile's migrations");
    check_clock(&mut cluster).expect("a controllable clock");
    let mut monitor = cluster.connect().expect("the monitor connection");
    let server_version: String = monitor.query_one("show server_version_num", &[]).expect("version").get(0);
    let sessions =
        (0..SESSIONS).map(|_| Session::open(cluster.connect().expect("a session")).expect("a session")).collect();
    let world = RefCell::new(World::new(monitor, sessions, &server_version, start_time()));
    let totals = RefCell::new(Counts::default());
    let cases = RefCell::new(0u64);
    let mut runner = TestRunner::new(config());
    let result = runner.run(&gen::ops(), |ops| {
        let mut world = world.borrow_mut();
        let outcome = run_case(&mut world, &ops, &server_version);
        if let Err(e) = outcome {
            let trace = world.trace.join("\n  ");
            return Err(TestCaseError::fail(format!("{e}\ntrace:\n  {trace}")));
        }
        *cases.borrow_mut() += 1;
        add(&mut totals.borrow_mut(), &world.counts);
        world.counts = Counts::default();
        Ok(())
    });
    let t = totals.into_inner();
    println!(
        "gw_conformance: {} sequences, {} statements ({} retried after a wait), {} transactions, {} commits, \
         {} lock waits, {} deadlocks, {} errors, {} claims ({} with other transactions open), \
         {} claims where PostgreSQL broke a tie otherwise than the model would, \
         {} statements not sent (racing waits), in {:.1} s",
        cases.into_inner(),
        t.statements,
        t.retries,
        t.transactions,
        t.commits,
        t.lock_waits,
        t.deadlocks,
        t.errors,
        t.claims,
        t.claims_skipping_locked,
        t.tie_breaks,
        t.skipped_races,
        started.elapsed().as_secs_f64()
    );
    drop(world);
    drop(cluster);
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn add(total: &mut Counts, c: &Counts) {
    total.statements += c.statements;
    total.transactions += c.transactions;
    total.commits += c.commits;
    total.lock_waits += c.lock_waits;
    total.retries += c.retries;
    total.errors += c.errors;
    total.deadlocks += c.deadlocks;
    total.claims += c.claims;
    total.claims_skipping_locked += c.claims_skipping_locked;
    total.tie_breaks += c.tie_breaks;
    total.skipped_races += c.skipped_races;
}
