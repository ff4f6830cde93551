//! Generator 2b: apalis-redis 1.0.0's own Lua scripts, read at test time
//! from the crate's source in cargo's registry, run with KEYS and ARGV in
//! the shapes apalis's Rust code (src/queries/*.rs) passes them: queue-
//! prefixed keys, ULID task ids, JSON payloads and metadata, timestamps in
//! seconds. The state they run over is built by the same scripts (tasks
//! pushed, workers registered, tasks fetched, leased, finished, reenqueued,
//! vacuumed), and ids are often taken from the model's current state, so the
//! scripts reach their real branches, not only their error paths.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use leasesim_redis_model::{Redis, Value};

use super::rng::Rng;

pub const SCRIPT_NAMES: &[&str] = &[
    "acquire_leases",
    "batch_push",
    "fetch_by_id",
    "fetch_next",
    "handle_results",
    "keep_alive",
    "list_all_tasks",
    "list_all_workers",
    "list_tasks",
    "list_workers",
    "overview",
    "overview_by_queue",
    "reenqueue_orphaned",
    "register_worker",
    "release_leases",
    "renew_leases",
    "stats",
    "vacuum",
    "vacuum_before",
];

const QUEUES: &[&str] = &["q", "q", "q", "mail"];
const WORKERS: &[&str] = &["w1", "w2", "w3"];
const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// How a script's reply is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Exact,
    /// `{data, {{id, field, value, ...}, ...}}`: the field/value pairs come
    /// from HGETALL, whose order Redis leaves unspecified.
    TasksWithMeta,
}

/// One script run to make.
pub struct Run {
    pub name: &'static str,
    pub keys: Vec<String>,
    pub args: Vec<String>,
    pub shape: Shape,
    /// The script pushes SMEMBERS results onto a list: Redis's set order is
    /// its hash table's, so the list's order may differ from the model's.
    pub set_order_into_list: bool,
}

/// The scripts' sources (by name) and the state of the generator.
pub struct Apalis {
    pub sources: BTreeMap<&'static str, String>,
    /// The apalis clock, in seconds; starts at the real time.
    base_s: u64,
    clock_s: u64,
    /// Task ids pushed, per queue. Queues never share an id: LIST_ALL_TASKS
    /// sorts ids across queues, and equal ids would leave the order of their
    /// entries to the hash order of HKEYS.
    tasks: BTreeMap<String, Vec<String>>,
}

/// The directory holding apalis-redis 1.0.0's Lua scripts: from
/// `cargo metadata`, else from cargo's registry sources.
pub fn lua_dir() -> PathBuf {
    from_cargo_metadata().or_else(from_registry).expect(
        "apalis-redis 1.0.0's sources not found; it is a dev-dependency of this crate, so `cargo fetch` should bring them",
    )
}

fn from_cargo_metadata() -> Option<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--manifest-path", manifest])
        .output()
        .ok()?;
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let package =
        meta["packages"].as_array()?.iter().find(|p| p["name"] == "apalis-redis" && p["version"] == "1.0.0")?;
    let dir = PathBuf::from(package["manifest_path"].as_str()?).parent()?.join("lua");
    dir.is_dir().then_some(dir)
}

fn from_registry() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(home.join("registry/src"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("apalis-redis-1.0.0/lua"))
        .collect();
    dirs.sort();
    dirs.into_iter().find(|d| d.is_dir())
}

impl Apalis {
    pub fn load(now_s: u64) -> Apalis {
        let dir = lua_dir();
        let sources = SCRIPT_NAMES
            .iter()
            .map(|name| {
                let path = dir.join(format!("{name}.lua"));
                let body = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                (*name, body)
            })
            .collect();
        Apalis { sources, base_s: now_s, clock_s: now_s, tasks: BTreeMap::new() }
    }

    /// A new ULID-shaped task id (26 Crockford base32 characters) for `q`.
    fn new_task_id(&mut self, rng: &mut Rng, q: &str) -> String {
        let id: String = (0..26).map(|i| if i == 0 { '0' } else { *rng.pick(CROCKFORD) as char }).collect();
        self.tasks.entry(q.to_string()).or_default().push(id.clone());
        id
    }

    /// A task id pushed on `q` before, or sometimes a new one.
    fn known_task(&mut self, rng: &mut Rng, q: &str) -> String {
        match self.tasks.get(q) {
            Some(ids) if !ids.is_empty() && !rng.chance(10) => rng.pick(ids).clone(),
            _ => self.new_task_id(rng, q),
        }
    }

    /// Task ids held in `worker`'s inflight set in the model, plus
    /// sometimes an id it does not hold.
    fn held_tasks(
        &mut self,
        rng: &mut Rng,
        model: &Redis,
        now_ms: u64,
        q: &str,
        inflight: &str,
        max: usize,
    ) -> Vec<String> {
        let held: Vec<String> = match model.get(now_ms, inflight.as_bytes()) {
            Some(Value::Set(s)) => s.iter().map(|m| String::from_utf8_lossy(m).into_owned()).collect(),
            _ => Vec::new(),
        };
        let mut ids: Vec<String> = held.into_iter().filter(|_| rng.chance(70)).take(max).collect();
        if ids.is_empty() || rng.chance(15) {
            ids.push(self.known_task(rng, q));
        }
        ids
    }

    /// Mostly a worker the model has registered on `q` (so scripts get past
    /// their registration checks), else any.
    fn worker(&mut self, rng: &mut Rng, model: &Redis, now_ms: u64, q: &str) -> String {
        let registered: Vec<String> = match model.get(now_ms, format!("{q}:workers").as_bytes()) {
            Some(Value::ZSet(z)) => z.iter().map(|(m, _)| String::from_utf8_lossy(m).into_owned()).collect(),
            _ => Vec::new(),
        };
        if registered.is_empty() || rng.chance(20) {
            rng.pick(WORKERS).to_string()
        } else {
            rng.pick(&registered).clone()
        }
    }

    /// A timestamp near the apalis clock, in seconds.
    fn now(&mut self, rng: &mut Rng) -> String {
        (self.clock_s + rng.below(3) as u64).to_string()
    }

    /// A completion time: at the start of the run or well before it, so
    /// VACUUM_BEFORE's cutoff (server TIME minus 0, 1 h or 1 day) never
    /// falls within seconds of it, whatever the two clocks say.
    fn done_at(&mut self, rng: &mut Rng) -> String {
        (self.base_s - *rng.pick(&[0u64, 5_000, 100_000, 200_000])).to_string()
    }

    pub fn next(&mut self, rng: &mut Rng, model: &Redis, now_ms: u64) -> Run {
        self.clock_s += rng.below(8) as u64;
        let q = rng.pick(QUEUES).to_string();
        let w = self.worker(rng, model, now_ms, &q);
        let k = |suffix: &str| format!("{q}:{suffix}");
        let emit = rng.pick(&["0", "1"]).to_string();
        let run = |name, keys: Vec<String>, args: Vec<String>| Run {
            name,
            keys,
            args,
            shape: Shape::Exact,
            set_order_into_list: false,
        };
        match rng.below(100) {
            0..=19 => {
                let keys = vec![k("data"), k("active"), k("signal"), k("meta"), k("scheduled"), k("idempotency")];
                let mut args = vec![rng.pick(&["0", "0", "3600", ""]).to_string(), emit];
                for _ in 0..1 + rng.below(3) {
                    args.extend(self.push_group(rng, &q));
                }
                run("batch_push", keys, args)
            }
            20..=27 => {
                let keys = vec![k("workers"), format!("{q}:workers:metadata:{w}")];
                let threshold = rng.pick(&["60", "0", "120"]).to_string();
                let service = rng.pick(&["TaskFn<send_email>", "svc", ""]).to_string();
                run("register_worker", keys, vec![self.now(rng), w, threshold, "RedisStorage".into(), service])
            }
            28..=33 => run("keep_alive", vec![k("workers")], vec![self.now(rng), w]),
            34..=48 => {
                let keys = vec![
                    k("workers"),
                    k("active"),
                    format!("{q}:inflight:{w}"),
                    k("data"),
                    k("signal"),
                    k("meta"),
                    k("scheduled"),
                ];
                let batch = rng.pick(&["1", "2", "5", "10"]).to_string();
                Run { shape: Shape::TasksWithMeta, ..run("fetch_next", keys, vec![self.now(rng), batch, w]) }
            }
            49..=56 => {
                let inflight = format!("{q}:inflight:{w}");
                let keys = vec![inflight.clone(), k("workers"), k("meta"), k("active")];
                let mut args = vec![w, self.now(rng), emit];
                args.extend(self.held_tasks(rng, model, now_ms, &q, &inflight, 3).into_iter().take(rng.below(4)));
                run("acquire_leases", keys, args)
            }
            57..=62 => {
                let inflight = format!("{q}:inflight:{w}");
                let mut keys = vec![inflight.clone(), k("workers"), k("meta")];
                // apalis passes three keys; the script's event names a fourth.
                if rng.chance(50) {
                    keys.push(k("active"));
                }
                let mut args = vec![w, self.now(rng), emit];
                args.extend(self.held_tasks(rng, model, now_ms, &q, &inflight, 3).into_iter().take(rng.below(4)));
                run("renew_leases", keys, args)
            }
            63..=68 => {
                let inflight = format!("{q}:inflight:{w}");
                let keys = vec![inflight.clone(), k("active"), k("signal"), k("workers"), k("meta")];
                let mut args = vec![w, emit];
                let release_all = rng.chance(50);
                if !release_all {
                    args.extend(self.held_tasks(rng, model, now_ms, &q, &inflight, 2));
                }
                Run { set_order_into_list: release_all, ..run("release_leases", keys, args) }
            }
            69..=78 => {
                let inflight = format!("{q}:inflight:{w}");
                let keys = vec![inflight.clone(), k("done"), k("dead"), k("scheduled"), k("meta")];
                let mut args = vec![emit];
                for id in self.held_tasks(rng, model, now_ms, &q, &inflight, 3) {
                    let result =
                        rng.pick(&[r#"{"Ok":null}"#, r#"{"Ok":"sent"}"#, r#"{"Err":"smtp: connection refused"}"#]);
                    let status = rng.pick(&["Done", "Done", "Failed", "Pending", "Killed"]);
                    let attempt = rng.pick(&["1", "2", "24", "25", "30"]);
                    args.extend([id, self.done_at(rng), result.to_string(), status.to_string(), attempt.to_string()]);
                }
                run("handle_results", keys, args)
            }
            79..=83 => {
                let keys = vec![k("workers"), k("active"), k("signal"), k("inflight")];
                // Workers whose last heartbeat is older count as dead.
                let mut args = vec![(self.clock_s - 60 - rng.below(240) as u64).to_string()];
                if rng.chance(50) {
                    args.push(w);
                }
                Run { set_order_into_list: true, ..run("reenqueue_orphaned", keys, args) }
            }
            84..=85 => run("vacuum", vec![k("data"), k("meta")], vec![]),
            86..=87 => {
                let duration = rng.pick(&["0", "3600", "86400"]).to_string();
                run("vacuum_before", vec![k("data"), k("meta")], vec![duration])
            }
            88 => run("stats", vec![k("active"), k("workers"), k("dead"), k("failed"), k("done")], vec![]),
            89 => {
                let mut args = vec![self.now(rng)];
                args.extend(rng.some(&["q", "mail", "none"], 1, 2).into_iter().map(String::from));
                run("overview", vec![], args)
            }
            90 => {
                let keys = if rng.chance(50) {
                    vec![k("active"), k("done"), k("dead"), k("inflight")]
                } else {
                    vec!["q".to_string(), "mail".to_string()]
                };
                run("overview_by_queue", keys, vec![self.now(rng)])
            }
            91 => run("list_workers", vec![k("workers"), format!("{q}:workers:")], vec![]),
            92 => run("list_all_workers", vec![], vec![]),
            93..=94 => {
                let id = self.known_task(rng, &q);
                Run { shape: Shape::TasksWithMeta, ..run("fetch_by_id", vec![k("data"), k("meta")], vec![id]) }
            }
            95..=97 => {
                let list = if rng.chance(50) { k("active") } else { q.clone() };
                let args = self.page_args(rng);
                Run { shape: Shape::TasksWithMeta, ..run("list_tasks", vec![k("data"), k("meta"), list], args) }
            }
            _ => {
                let mut keys = vec![k("data"), k("meta")];
                if rng.chance(50) {
                    keys.extend(["mail:data".to_string(), "mail:meta".to_string()]);
                }
                let args = self.page_args(rng);
                Run { shape: Shape::TasksWithMeta, ..run("list_all_tasks", keys, args) }
            }
        }
    }

    /// Status filter, page and page size, as apalis's Filter gives them.
    fn page_args(&mut self, rng: &mut Rng) -> Vec<String> {
        let status = rng.pick(&["", "", "Pending", "Running", "Done", "Failed"]);
        let page = rng.pick(&["1", "1", "2", "0", "x"]);
        let size = rng.pick(&["10", "2", "x"]);
        vec![status.to_string(), page.to_string(), size.to_string()]
    }

    /// One task of BATCH_PUSH: id, data, attempts, max attempts, metadata
    /// JSON, schedule time and idempotency key.
    fn push_group(&mut self, rng: &mut Rng, q: &str) -> Vec<String> {
        let id = if rng.chance(85) { self.new_task_id(rng, q) } else { self.known_task(rng, q) };
        let data = match rng.below(3) {
            0 => r#"{"to":"a@example.com"}"#.to_string(),
            1 => format!(
                r#"{{"to":"user{}@example.com","subject":"A subject long enough to make the hash value exceed 64 bytes"}}"#,
                rng.below(100)
            ),
            _ => "42".to_string(),
        };
        let meta = rng
            .pick(&[
                "{}",
                r#"{"trace":"abc","tries":3}"#,
                r#"{"z":1,"a":{"nested":[1,2]},"m":"x","b":true,"k":1.5}"#,
                r#"{"run_after":"2024-01-01T00:00:00Z","priority":null}"#,
                "not json",
                "",
                "[1,2]",
            ])
            .to_string();
        let at = match rng.below(20) {
            0..=2 => "0".to_string(),
            3 => "".to_string(),
            4 => "soon".to_string(),
            _ => (self.clock_s + rng.below(40) as u64).saturating_sub(20).to_string(),
        };
        let idempotency = rng.pick(&["", "", "", "", "order-1", "order-2"]).to_string();
        let attempts = rng.pick(&["0", "1", "3"]).to_string();
        let max_attempts = rng.pick(&["25", "3"]).to_string();
        vec![id, data, attempts, max_attempts, meta, at, idempotency]
    }
}
