//! PgBouncer in transaction mode in front of the tests' PostgreSQL: Debian's 1.18 (no
//! prepared statements across transactions), started in a temporary directory on a free
//! port, any database passed through (`* =`), trust authentication. Dropped, it is
//! killed and its directory removed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{as_postgres, install_package, is_root};

/// One PgBouncer.
pub struct PgBouncer {
    dir: PathBuf,
    child: Child,
    /// Where it listens on 127.0.0.1.
    pub port: u16,
}

impl PgBouncer {
    /// Starts one in front of `upstream` (`host:port`), `pool_size` server connections
    /// per database, and waits until it accepts connections.
    ///
    /// # Panics
    /// When pgbouncer is missing and cannot be installed (Debian's `pgbouncer`, which
    /// `.ci/run` installs first), or it does not listen within 10 s.
    pub fn start(upstream: &str, pool_size: u32) -> PgBouncer {
        install_package("/usr/sbin/pgbouncer", "pgbouncer");
        let dir =
            std::env::temp_dir().join(format!("sk-pgbouncer-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (host, upstream_port) = upstream.split_once(':').expect("host:port");
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n\
                 * = host={host} port={upstream_port}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {users}\n\
                 pool_mode = transaction\n\
                 max_client_conn = 2000\n\
                 default_pool_size = {pool_size}\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 logfile = {log}\n",
                users = dir.join("users.txt").display(),
                log = dir.join("pgbouncer.log").display(),
            ),
        )
        .unwrap();
        as_postgres(&dir);
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "pgbouncer"]);
            c
        } else {
            Command::new("pgbouncer")
        };
        let child = command
            .arg(dir.join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        let bouncer = PgBouncer { dir, child, port };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "pgbouncer did not listen on {port}: {}",
                std::fs::read_to_string(bouncer.dir.join("pgbouncer.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        bouncer
    }

    /// `url` (a postgres:// URL of the upstream server) through this PgBouncer, with
    /// sqlx's statement cache off (what tells sk it is behind a transaction pooler).
    pub fn url_of(&self, url: &str) -> String {
        let (base, query) = url
            .split_once('?')
            .map_or((url, None), |(b, q)| (b, Some(q)));
        let scheme_end = base.find("://").map_or(0, |i| i + 3);
        let path = base[scheme_end..]
            .find('/')
            .map_or(base.len(), |i| i + scheme_end);
        let authority = &base[scheme_end..path];
        let user = authority
            .rsplit_once('@')
            .map(|(u, _)| format!("{u}@"))
            .unwrap_or_default();
        let params = match query {
            Some(q) => format!("?{q}&statement-cache-capacity=0"),
            None => "?statement-cache-capacity=0".to_owned(),
        };
        format!(
            "{}{user}127.0.0.1:{}{}{params}",
            &base[..scheme_end],
            self.port,
            &base[path..]
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.child.id().to_string()])
            .status();
        // runuser's child, pgbouncer itself.
        let _ = Command::new("pkill")
            .args([
                "-KILL",
                "-f",
                "--",
                &format!("pgbouncer {}", self.dir.join("pgbouncer.ini").display()),
            ])
            .status();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
