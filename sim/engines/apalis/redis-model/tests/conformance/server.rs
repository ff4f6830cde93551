//! A throwaway redis-server on a free loopback port, in its own temporary
//! directory, killed and cleaned up when the guard drops.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::resp::Connection;
use leasesim_redis_model::Reply;

/// $REDIS_SERVER, else `redis-server` on the PATH.
pub fn find_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("REDIS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("redis-server")).find(|p| p.is_file())
}

pub struct Server {
    child: Child,
    dir: PathBuf,
    pub port: u16,
}

impl Server {
    pub fn start(binary: &Path) -> Server {
        let mut last_error = String::new();
        for attempt in 0..5 {
            let nanos = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_nanos();
            let name = format!("leasesim-redis-conformance-{}-{nanos}-{attempt}", std::process::id());
            let dir = std::env::temp_dir().join(name);
            std::fs::create_dir_all(&dir).expect("create the server's temporary directory");
            let port = free_port();
            let child = Command::new(binary)
                .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1", "--port"])
                .arg(port.to_string())
                .arg("--dir")
                .arg(&dir)
                .args(["--logfile", "server.log"])
                // Lua's string comparison (table.sort) follows LC_COLLATE,
                // which redis-server takes from the environment; the model's
                // Lua runs in the "C" locale.
                .env("LC_ALL", "C")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
            let server = Server { child, dir, port };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match Connection::open(self.port).and_then(|mut c| c.call(&[b"PING".to_vec()])) {
                Ok(Reply::Status(s)) if s == "PONG" => return Ok(()),
                Ok(other) => return Err(format!("PING answered {other:?}")),
                Err(e) if Instant::now() > deadline => return Err(e.to_string()),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("a bound address").port()
}
