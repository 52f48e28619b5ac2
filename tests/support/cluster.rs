//! A replicated PostgreSQL cluster for the tests: pg_auto_failover's monitor and two
//! nodes (a primary and a standby, synchronous unless asked otherwise), from Debian's
//! `postgresql-15-auto-failover`, each a process group of its own in a temporary
//! directory, on free ports of 127.0.0.1 with trust authentication. Dropped, it kills
//! them all and removes the directory.
//!
//! The monitor's health checks are tightened (a check every second, a node unhealthy
//! after 2 s) and the time it waits for a lost primary to confirm its demotion
//! (`primary_demote_timeout`, 30 s by default) is cut to `DEMOTE_WAIT`, so that a
//! failover takes seconds in a test; docs/scaling.md gives the figures with the defaults.
//!
//! Self-contained, so that `examples/failover.rs` includes the same file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sqlx::Connection as _;

/// PostgreSQL's programs (`pg_ctl`, `initdb`), which `pg_autoctl` runs.
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// How long the monitor waits for a lost primary to confirm its demotion before it lets
/// the promoted standby take writes.
pub const DEMOTE_WAIT: Duration = Duration::from_secs(3);

/// The monitor's health checks as the tests set them.
const TUNED: [(&str, &str); 5] = [
    ("health_check_period", "1000"),
    ("health_check_timeout", "1000"),
    ("health_check_max_retries", "1"),
    ("health_check_retry_delay", "500"),
    ("node_considered_unhealthy_timeout", "2000"),
];

/// One `pg_autoctl` service (the monitor or a node) and its PostgreSQL.
struct Service {
    child: Option<Child>,
    pgdata: PathBuf,
    port: u16,
}

/// The monitor and the two nodes.
pub struct Cluster {
    dir: PathBuf,
    monitor: Service,
    nodes: Vec<Service>,
}

impl Cluster {
    /// Starts the monitor and two nodes and waits until one is primary and the other its
    /// standby. With `synchronous`, a commit on the primary returns once the standby
    /// has it (pg_auto_failover's default, `synchronous_standby_names = 'ANY 1 (...)'`);
    /// without, the standby is asynchronous (`replication-quorum false`).
    ///
    /// # Panics
    /// When `pg_autoctl` is missing and cannot be installed (Debian's
    /// `postgresql-15-auto-failover`, which `.ci/run` installs first), or the cluster
    /// does not come up within a minute.
    pub async fn start(synchronous: bool) -> Cluster {
        install();
        let dir =
            std::env::temp_dir().join(format!("sk-cluster-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        as_postgres(&dir);
        let ports = free_ports(3);
        let mut cluster = Cluster {
            monitor: Service {
                child: None,
                pgdata: dir.join("monitor"),
                port: ports[0],
            },
            nodes: Vec::new(),
            dir,
        };
        let port = cluster.monitor.port.to_string();
        let pgdata = cluster.monitor.pgdata.display().to_string();
        cluster.monitor.child = Some(cluster.autoctl(
            "monitor",
            &["create", "monitor", "--pgdata", &pgdata, "--pgport", &port],
        ));
        let monitor = cluster.monitor_admin_url();
        settle("the monitor", Duration::from_secs(60), || async {
            sqlx::PgConnection::connect(&monitor).await.ok().map(|_| ())
        })
        .await;
        let mut admin = sqlx::PgConnection::connect(&monitor).await.unwrap();
        let demote = DEMOTE_WAIT.as_millis().to_string();
        for (name, value) in TUNED
            .iter()
            .chain([&("primary_demote_timeout", demote.as_str())])
        {
            sqlx::query(&format!("ALTER SYSTEM SET pgautofailover.{name} = {value}"))
                .execute(&mut admin)
                .await
                .unwrap();
        }
        sqlx::query("SELECT pg_reload_conf()")
            .execute(&mut admin)
            .await
            .unwrap();
        for (i, port) in ports[1..].iter().enumerate() {
            cluster.add_node(i, *port).await;
        }
        if !synchronous {
            let pgdata = cluster.nodes[1].pgdata.display().to_string();
            let out = cluster
                .autoctl_command(&[
                    "set",
                    "node",
                    "replication-quorum",
                    "false",
                    "--pgdata",
                    &pgdata,
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let primary = cluster.node_url(0);
            settle(
                "asynchronous replication",
                Duration::from_secs(60),
                || async {
                    let mut c = sqlx::PgConnection::connect(&primary).await.ok()?;
                    let names: String = sqlx::query_scalar("SHOW synchronous_standby_names")
                        .fetch_one(&mut c)
                        .await
                        .ok()?;
                    names.is_empty().then_some(())
                },
            )
            .await;
        }
        // Started once every node's reported state meets its goal, one the primary and the
        // other its secondary. `primary()` alone is not enough: it counts a wait_primary
        // whose states meet, which the monitor moves on to primary when the secondary has
        // caught up, and `primary()` then says none for a moment (a test that asked for
        // the primary just after the start failed so).
        settle(
            "a primary and its secondary",
            Duration::from_secs(60),
            || cluster.in_place(),
        )
        .await;
        cluster
    }

    /// `Some` when every node's reported state meets its goal, one node is the primary
    /// and the others its secondaries.
    async fn in_place(&self) -> Option<()> {
        let mut c = sqlx::PgConnection::connect(&self.monitor_admin_url())
            .await
            .ok()?;
        let (primaries, secondaries, met): (i64, i64, bool) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE reportedstate = 'primary'),
                    count(*) FILTER (WHERE reportedstate = 'secondary'),
                    coalesce(bool_and(goalstate = reportedstate), false)
             FROM pgautofailover.node",
        )
        .fetch_one(&mut c)
        .await
        .ok()?;
        (met && primaries == 1 && secondaries == self.nodes.len() as i64 - 1).then_some(())
    }

    async fn add_node(&mut self, i: usize, port: u16) {
        let pgdata = self.dir.join(format!("node{}", i + 1));
        let monitor = self.monitor_url();
        let child = self.autoctl(
            &format!("node{}", i + 1),
            &[
                "create",
                "postgres",
                "--pgdata",
                &pgdata.display().to_string(),
                "--pgport",
                &port.to_string(),
                "--monitor",
                &monitor,
            ],
        );
        self.nodes.push(Service {
            child: Some(child),
            pgdata,
            port,
        });
        let want = if i == 0 { ["single"] } else { ["secondary"] };
        let admin = self.monitor_admin_url();
        settle(
            &format!("node {} to be {}", i + 1, want[0]),
            Duration::from_secs(90),
            || async {
                let mut c = sqlx::PgConnection::connect(&admin).await.ok()?;
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pgautofailover.node WHERE nodeport = $1 AND reportedstate::text = $2 AND goalstate::text = $2",
                )
                .bind(i32::from(port))
                .bind(want[0])
                .fetch_one(&mut c)
                .await
                .ok()?;
                (n == 1).then_some(())
            },
        )
        .await;
    }

    /// The URL that lists both nodes, as `pg_autoctl show uri` prints it.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!(
            "postgres://postgres@{}/postgres?target_session_attrs=read-write&sslmode=disable",
            hosts.join(",")
        )
    }

    /// The URL of node `i` alone.
    pub fn node_url(&self, i: usize) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.nodes[i].port
        )
    }

    fn monitor_url(&self) -> String {
        format!(
            "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=disable",
            self.monitor.port
        )
    }

    fn monitor_admin_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/pg_auto_failover?sslmode=disable",
            self.monitor.port
        )
    }

    /// The node the monitor has as primary now (reported and assigned).
    pub async fn primary(&self) -> Option<usize> {
        let mut c = sqlx::PgConnection::connect(&self.monitor_admin_url())
            .await
            .ok()?;
        let port: i32 = sqlx::query_scalar(
            "SELECT nodeport FROM pgautofailover.node WHERE reportedstate IN ('primary', 'wait_primary', 'single')
               AND goalstate = reportedstate",
        )
        .fetch_optional(&mut c)
        .await
        .ok()??;
        self.nodes.iter().position(|n| i32::from(n.port) == port)
    }

    /// Whether the monitor has node `i` as unhealthy now (its last health check failed).
    pub async fn unhealthy(&self, i: usize) -> bool {
        let Ok(mut c) = sqlx::PgConnection::connect(&self.monitor_admin_url()).await else {
            return false;
        };
        let health: Option<i32> =
            sqlx::query_scalar("SELECT health FROM pgautofailover.node WHERE nodeport = $1")
                .bind(i32::from(self.nodes[i].port))
                .fetch_optional(&mut c)
                .await
                .ok()
                .flatten();
        health == Some(0)
    }

    /// The monitor's events, oldest first, as `time node: description`.
    pub async fn events(&self) -> Vec<String> {
        let mut c = sqlx::PgConnection::connect(&self.monitor_admin_url())
            .await
            .unwrap();
        sqlx::query_scalar(
            "SELECT to_char(eventtime, 'HH24:MI:SS.MS') || ' ' || nodename || ': ' || description
             FROM pgautofailover.event ORDER BY eventid",
        )
        .fetch_all(&mut c)
        .await
        .unwrap()
    }

    /// Puts the monitor's health checks and demote wait back to pg_auto_failover's
    /// defaults (a check every 5 s, a node unhealthy after 20 s, a demote wait of 30 s).
    pub async fn monitor_defaults(&self) {
        let mut admin = sqlx::PgConnection::connect(&self.monitor_admin_url())
            .await
            .unwrap();
        for name in TUNED.iter().map(|t| t.0).chain(["primary_demote_timeout"]) {
            sqlx::query(&format!("ALTER SYSTEM RESET pgautofailover.{name}"))
                .execute(&mut admin)
                .await
                .unwrap();
        }
        sqlx::query("SELECT pg_reload_conf()")
            .execute(&mut admin)
            .await
            .unwrap();
    }

    /// Starts node `i` again after [`Cluster::kill`]: its `pg_autoctl run` rejoins the
    /// cluster (as the standby, once the monitor has promoted the other); waits until
    /// the monitor has both nodes healthy again, one primary and one secondary.
    pub async fn restart(&mut self, i: usize) {
        let pgdata = self.nodes[i].pgdata.display().to_string();
        let child = self.autoctl_run(
            &format!("node{}-again", i + 1),
            &["run", "--pgdata", &pgdata],
        );
        self.nodes[i].child = Some(child);
        let admin = self.monitor_admin_url();
        let primary = self.node_url(1 - i);
        let nudged = std::cell::Cell::new(std::time::Instant::now());
        let (primary, nudged, admin) = (&primary, &nudged, &admin);
        settle("both nodes back", Duration::from_secs(120), || async move {
            // The node copies the primary afresh (pg_rewind fails on this packaging of
            // PostgreSQL 15: "standby mode is not supported by single-user servers"),
            // and pg_basebackup waits for a spread checkpoint (minutes): hurry it.
            if nudged.get().elapsed() > Duration::from_secs(2) {
                nudged.set(std::time::Instant::now());
                if let Ok(mut p) = sqlx::PgConnection::connect(primary).await {
                    let _ = sqlx::query("CHECKPOINT").execute(&mut p).await;
                }
            }
            let mut c = sqlx::PgConnection::connect(admin).await.ok()?;
            let states: Vec<String> = sqlx::query_scalar(
                "SELECT reportedstate::text FROM pgautofailover.node
                 WHERE reportedstate = goalstate ORDER BY 1",
            )
            .fetch_all(&mut c)
            .await
            .ok()?;
            (states == ["primary", "secondary"]).then_some(())
        })
        .await;
    }

    /// Kills node `i` as a host dies: its `pg_autoctl` and its PostgreSQL, with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        kill_service(node);
    }

    /// Freezes node `i` as a host that stops answering: its `pg_autoctl` and its
    /// PostgreSQL stopped (SIGSTOP), their sockets open, nothing answered, no session
    /// ended. [`Cluster::kill`] then ends it as a fenced host.
    pub fn freeze(&mut self, i: usize) {
        signal_service(&self.nodes[i], "-STOP");
    }

    /// The port node `i` listens on.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// Lets clients from `cidr` in on both nodes (trust, as the rest): an entry in each
    /// node's `pg_hba.conf` (a standby copied from the primary later has it too) and a
    /// reload. pg_auto_failover's own entries admit 127.0.0.1 only.
    pub async fn allow_from(&self, cidr: &str) {
        use std::io::Write as _;
        for (i, node) in self.nodes.iter().enumerate() {
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(node.pgdata.join("pg_hba.conf"))
                .unwrap();
            writeln!(hba, "host all all {cidr} trust").unwrap();
            let mut c = sqlx::PgConnection::connect(&self.node_url(i))
                .await
                .unwrap();
            sqlx::query("SELECT pg_reload_conf()")
                .execute(&mut c)
                .await
                .unwrap();
        }
    }

    /// A `pg_autoctl` command as the user PostgreSQL runs as, with the cluster's
    /// environment (its configuration under the cluster's directory).
    fn autoctl_command(&self, args: &[&str]) -> Command {
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "pg_autoctl"]);
            c
        } else {
            Command::new("pg_autoctl")
        };
        let path = std::env::var("PATH").unwrap_or_default();
        command
            .args(args)
            .env("PATH", format!("{PG_BIN}:{path}"))
            .env("XDG_CONFIG_HOME", self.dir.join("config"))
            .env("XDG_DATA_HOME", self.dir.join("data"))
            .env("XDG_RUNTIME_DIR", self.dir.join("run"));
        command
    }

    /// Starts a `pg_autoctl create … --run` service in a process group of its own, its
    /// output in `name.log`.
    fn autoctl(&self, name: &str, args: &[&str]) -> Child {
        let mut args = args.to_vec();
        args.extend([
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
            "--run",
        ]);
        self.autoctl_run(name, &args)
    }

    /// Starts `pg_autoctl args` in a process group of its own, its output in `name.log`.
    fn autoctl_run(&self, name: &str, args: &[&str]) -> Child {
        use std::os::unix::process::CommandExt as _;
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let mut command = self.autoctl_command(args);
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0);
        command.spawn().expect("start pg_autoctl")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            kill_service(node);
        }
        kill_service(&mut self.monitor);
        if std::thread::panicking() {
            eprintln!("the cluster's logs are left in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The pid of a service's postmaster, from its data directory's `postmaster.pid`.
fn postmaster_pid(service: &Service) -> Option<String> {
    std::fs::read_to_string(service.pgdata.join("postmaster.pid"))
        .ok()
        .and_then(|text| text.lines().next().map(|l| l.trim().to_owned()))
}

/// `signal` (as `kill` takes it) to a service's process group, its postmaster and the
/// postmaster's children.
fn signal_service(service: &Service, signal: &str) {
    if let Some(child) = &service.child {
        let _ = Command::new("kill")
            .args([signal, "--", &format!("-{}", child.id())])
            .status();
    }
    if let Some(pid) = postmaster_pid(service) {
        let _ = Command::new("kill").args([signal, &pid]).status();
        let _ = Command::new("pkill").args([signal, "-P", &pid]).status();
    }
}

/// SIGKILL to a service's PostgreSQL children, its process group, and any PostgreSQL
/// process of its data directory that left the group.
fn kill_service(service: &mut Service) {
    // The postmaster's children first: killed after it, some (the monitor's health
    // check worker, its logger) were seen to live on, orphaned.
    let postmaster = postmaster_pid(service);
    if let Some(pid) = &postmaster {
        let _ = Command::new("pkill").args(["-KILL", "-P", pid]).status();
    }
    // Each process of the group, to wait for below.
    let group: Vec<String> = service
        .child
        .as_ref()
        .and_then(|child| {
            let out = Command::new("pgrep")
                .args(["-g", &child.id().to_string()])
                .output()
                .ok()?;
            Some(
                String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect(),
            )
        })
        .unwrap_or_default();
    if let Some(mut child) = service.child.take() {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .status();
        let _ = child.wait();
    }
    let _ = Command::new("pkill")
        .args([
            "-KILL",
            "-f",
            "--",
            &format!("-D {}( |$)", service.pgdata.display()),
        ])
        .status();
    // Gone, reaped too: a `pg_autoctl` started again at once otherwise finds the
    // killed one's pid in its pid file still taken (a zombie not yet reaped: seen after
    // a frozen node was killed) and refuses to start.
    let start = std::time::Instant::now();
    while group
        .iter()
        .chain(&postmaster)
        .any(|pid| Path::new(&format!("/proc/{pid}")).exists())
        && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Debian's pg_auto_failover, installed where it is missing.
fn install() {
    install_package("/usr/bin/pg_autoctl", "postgresql-15-auto-failover");
}

/// Debian's `package`, installed unless `binary` exists (once at a time per process:
/// two installs at once would contend for apt's lock).
pub fn install_package(binary: &str, package: &str) {
    static ONCE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = ONCE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if Path::new(binary).exists() {
        return;
    }
    eprintln!("installing Debian's {package} for the tests");
    let sudo = if is_root() { vec![] } else { vec!["sudo"] };
    for args in [
        vec!["apt-get", "update", "-q"],
        vec!["apt-get", "install", "-y", "-q", package],
    ] {
        let mut all = sudo.clone();
        all.extend(args);
        let status = Command::new(all[0])
            .args(&all[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .unwrap_or_else(|e| panic!("{all:?}: {e}"));
        assert!(status.success(), "{all:?} failed: the tests need {package}");
    }
}

/// Whether the tests run as root (PostgreSQL's programs then run as `postgres`).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// Gives `dir` to the user PostgreSQL runs as, when the tests run as root.
pub fn as_postgres(dir: &Path) {
    if is_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "chown {}", dir.display());
    }
}

/// `n` ports free on 127.0.0.1 now.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// Waits until `check` gives a value, polling every 20 ms; panics after `timeout`.
async fn settle<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
