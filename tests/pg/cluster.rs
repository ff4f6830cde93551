//! A throwaway PostgreSQL cluster for one test process.
//!
//! `initdb` and `postgres` from the installed server binaries, on a fresh
//! temporary directory. The server listens on a Unix socket in that directory
//! only (no TCP), so its port cannot collide with anything else on the
//! machine. Dropping the [`Cluster`] stops the server (`pg_ctl -m immediate`)
//! and removes the directory, also when the test panics; a cluster whose
//! test process was killed before that is removed by the next test run.
//! `initdb` refuses to run as root: as root, every server binary runs as the
//! unprivileged user `postgres` (which the Debian package creates) through
//! `runuser`.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How to get the server binaries, for skip and error lines.
pub const INSTALL_HINT: &str = "apt-get install postgresql, or set PG_BINDIR to the directory of initdb";

/// The unprivileged user that runs the server when the test runs as root.
const SERVER_USER: &str = "postgres";
/// The database superuser initdb creates (trust authentication, socket only).
const DB_USER: &str = "leasesim";
/// Only names the socket file; the socket directory is private to this cluster.
const PORT: u16 = 5432;
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The directory of `initdb`, `postgres` and `pg_ctl`: `$PG_BINDIR`, else the
/// newest Debian `/usr/lib/postgresql/<version>/bin`, else the first `PATH`
/// entry that has all three. `None`: no server binaries on this machine.
pub fn find_bindir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BINDIR") {
        return Some(PathBuf::from(dir)).filter(|dir| has_server(dir));
    }
    let mut debian: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.split('.').map(|n| n.parse().ok()).collect::<Option<_>>()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    debian.sort();
    if let Some((_, dir)) = debian.into_iter().rev().find(|(_, dir)| has_server(dir)) {
        return Some(dir);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).find(|dir| has_server(dir))
}

fn has_server(dir: &Path) -> bool {
    ["initdb", "postgres", "pg_ctl"].iter().all(|bin| dir.join(bin).is_file())
}

pub struct Cluster {
    bindir: PathBuf,
    /// Holds the data directory, the socket and the server log.
    dir: PathBuf,
    /// The user the server binaries run as (`None`: the current user).
    run_as: Option<&'static str>,
    server: Option<Child>,
}

impl Cluster {
    /// Creates a cluster and starts its server; [`Cluster::connect`] waits
    /// until it accepts connections.
    pub fn start(bindir: &Path) -> Result<Cluster, String> {
        let run_as = if current_uid()? == 0 { Some(SERVER_USER) } else { None };
        remove_stale_clusters(bindir, run_as);
        let dir = make_temp_dir()?;
        // From here on, Drop removes the directory whatever fails next.
        let mut cluster = Cluster { bindir: bindir.to_owned(), dir, run_as, server: None };
        if let Some(user) = run_as {
            give_to(&cluster.dir, user)?;
        }
        cluster.initdb()?;
        cluster.spawn_server()?;
        Ok(cluster)
    }

    /// A connection to the cluster; retries while the server is starting.
    pub fn connect(&mut self) -> Result<postgres::Client, String> {
        let conninfo = self.conninfo();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let err = match postgres::Client::connect(&conninfo, postgres::NoTls) {
                Ok(client) => return Ok(client),
                Err(err) => err,
            };
            let server = self.server.as_mut().expect("the server was spawned");
            if let Ok(Some(status)) = server.try_wait() {
                return Err(format!("the server exited ({status}); its log:\n{}", self.log()));
            }
            if Instant::now() > deadline {
                return Err(format!("no connection after {READY_TIMEOUT:?}: {err}; server log:\n{}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What [`postgres::Client::connect`] needs for a connection to the cluster.
    pub fn conninfo(&self) -> String {
        format!("host={} port={PORT} user={DB_USER} dbname=postgres", self.dir.display())
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// A server binary, run as the unprivileged user when we are root.
    fn command(&self, bin: &str) -> Command {
        let path = self.bindir.join(bin);
        let mut cmd = match self.run_as {
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args([OsStr::new("-u"), OsStr::new(user), OsStr::new("--"), path.as_os_str()]);
                cmd
            }
            None => Command::new(path),
        };
        // The server user may not be allowed into the test's working directory.
        cmd.current_dir(&self.dir).stdin(Stdio::null());
        cmd
    }

    fn initdb(&self) -> Result<(), String> {
        let out = self
            .command("initdb")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-U", DB_USER, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"])
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if !out.status.success() {
            let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            return Err(format!("initdb failed ({}):\n{stdout}{stderr}", out.status));
        }
        Ok(())
    }

    /// Starts the server in the foreground of a child process: a Ctrl-C of
    /// the test reaches it too (`pg_ctl start` would detach it).
    fn spawn_server(&mut self) -> Result<(), String> {
        let log =
            File::create(self.dir.join("server.log")).map_err(|e| format!("cannot create the server log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let socket_dir = format!("unix_socket_directories={}", self.dir.display());
        let port = format!("port={PORT}");
        // Durability is worthless here: the cluster lives for one test run.
        let settings = [
            "listen_addresses=",
            &socket_dir,
            &port,
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "shared_buffers=16MB",
            "max_connections=20",
            // Deadlocks (graphile's conformance makes some) are found fast.
            "deadlock_timeout=20ms",
            // An autovacuum or autoanalyze worker takes locks of its own (a
            // LOCK TABLE waits for it) and reuses heap space.
            "autovacuum=off",
            "wal_level=minimal",
            "max_wal_senders=0",
            "log_min_messages=warning",
        ];
        let mut cmd = self.command("postgres");
        cmd.arg("-D").arg(self.data_dir());
        for setting in settings {
            cmd.args(["-c", setting]);
        }
        let child = cmd.stdout(log).stderr(log_err).spawn().map_err(|e| format!("cannot run postgres: {e}"))?;
        self.server = Some(child);
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Immediate: no shutdown checkpoint, the data is thrown away.
        let stopped = self.data_dir().join("postmaster.pid").exists() && {
            let mut stop = self.command("pg_ctl");
            stop.arg("-D").arg(self.data_dir()).args(["-m", "immediate", "-w", "stop"]);
            stop.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
        };
        if let Some(mut server) = self.server.take() {
            if !stopped {
                let _ = server.kill();
            }
            let _ = server.wait();
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("leasesim's test cluster: could not remove {}: {e}", self.dir.display());
        }
    }
}

/// Cluster directories are named after the test process that owns them.
const DIR_PREFIX: &str = "leasesim-pg-";

fn make_temp_dir() -> Result<PathBuf, String> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Stops and removes the clusters of test processes that no longer run (killed
/// before their `Cluster` was dropped). Best effort: a failure leaves them.
fn remove_stale_clusters(bindir: &Path, run_as: Option<&'static str>) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)?.split('-').next()?.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        if process_alive(pid) != Some(false) {
            continue;
        }
        // Dropping it stops its server (if one still runs) and removes it.
        drop(Cluster { bindir: bindir.to_owned(), dir: entry.path(), run_as, server: None });
    }
}

/// From /proc (Linux): a killed process that nobody reaped yet is a zombie,
/// dead all the same. `None`: cannot tell.
fn process_alive(pid: u32) -> Option<bool> {
    if !Path::new("/proc/self").exists() {
        return None;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return Some(false) };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    Some(state != Some('Z'))
}

/// `id` answers for the current user (no user given) or for `user`.
fn id(flag: &str, user: Option<&str>) -> Result<u32, String> {
    let out = Command::new("id").arg(flag).args(user).output().map_err(|e| format!("cannot run id: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().parse().map_err(|_| format!("`id {flag} {}` answered {text:?}", user.unwrap_or_default()))
}

fn current_uid() -> Result<u32, String> {
    id("-u", None)
}

/// As root: the server user owns the cluster directory.
fn give_to(dir: &Path, user: &str) -> Result<(), String> {
    let (uid, gid) = id("-u", Some(user))
        .and_then(|uid| Ok((uid, id("-g", Some(user))?)))
        .map_err(|e| format!("running as root needs the user {user:?} for the server ({INSTALL_HINT}): {e}"))?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid)).map_err(|e| format!("cannot chown {}: {e}", dir.display()))
}
