//! Queues over several PostgreSQL servers through a `Router`: does throughput add up when
//! a second server joins, and which resource ends it.
//!
//! ```sh
//! cargo build --release -p sk-examples --bin databases
//! target/release/databases [--cores shared,one] [--servers 1,2] [--concurrency 1,16]
//!     [--jobs 60000] [--rounds 3]
//! ```
//!
//! Starts two PostgreSQL 15 servers of its own (`initdb` in a temporary directory, as
//! user `postgres` when run as root, on free ports, the server's default settings but
//! `shared_buffers = 256MB`), so that one server and two are measured alike; with
//! `--cores one`, server K runs on core K alone (`taskset`), as each on a host of one
//! core would, so that a second server brings a core of its own. For each
//! number of servers N and each worker concurrency C, in rounds interleaved: a fresh
//! database on each server, `--jobs` no-op jobs enqueued through the router in batches
//! of 1,000, spread evenly (queue `qK` pinned to server K), then one worker per server
//! (concurrency C, in this process) burns them down. Printed per N and C: jobs/s
//! (median of the rounds) and its ratio to one server, and the cores busy during the
//! burn-down: each server's processes, this process (the workers), the machine, and
//! iowait.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sk_runtime::{job, Router, Worker};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

#[path = "../tests/support/cluster.rs"]
#[allow(unreachable_pub, dead_code)]
mod cluster;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

static DONE: AtomicU64 = AtomicU64::new(0);

#[job]
async fn spread_noop(n: u64) {
    let _ = n;
    DONE.fetch_add(1, Ordering::Relaxed);
}

/// A PostgreSQL server of its own in a temporary directory, stopped and removed when
/// dropped.
struct Server {
    dir: PathBuf,
    port: u16,
}

impl Server {
    /// Starts the server, on CPU `core` alone when given (its processes inherit the
    /// affinity), as a server on a host of one core would be.
    fn start(name: &str, core: Option<usize>) -> Server {
        let dir = std::env::temp_dir().join(format!("sk-databases-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        cluster::as_postgres(&dir);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let data = dir.join("data");
        pg(&[
            "initdb",
            "-D",
            data.to_str().unwrap(),
            "-U",
            "postgres",
            "--auth",
            "trust",
        ]);
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c shared_buffers=256MB -c max_connections=200 -k {}",
            dir.display()
        );
        let core = core.map(|c| c.to_string());
        let log = dir.join("log");
        let mut start = match &core {
            Some(core) => vec!["taskset", "-c", core.as_str(), "pg_ctl"],
            None => vec!["pg_ctl"],
        };
        start.extend([
            "-D",
            data.to_str().unwrap(),
            "-l",
            log.to_str().unwrap(),
            "-o",
            &options,
            "-w",
            "start",
        ]);
        pg(&start);
        Server { dir, port }
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The postmaster's pid.
    fn pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).unwrap();
        text.lines().next().unwrap().trim().parse().unwrap()
    }

    /// CPU seconds used so far by the postmaster and its children.
    fn cpu(&self) -> f64 {
        let root = self.pid();
        let mut total = 0.0;
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Some((ppid, seconds)) = proc_cpu(&format!("/proc/{pid}/stat")) {
                if pid == root || ppid == root {
                    total += seconds;
                }
            }
        }
        total
    }

    /// A fresh database `name`, migrated, and a pool on it.
    async fn fresh(&self, name: &str) -> PgPool {
        let admin = PgPool::connect(&self.url("postgres")).await.unwrap();
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
            .execute(&admin)
            .await
            .unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(40)
            .connect(&self.url(name))
            .await
            .unwrap();
        sk_runtime::migrate(&pool, &Default::default())
            .await
            .unwrap();
        pool
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        pg(&[
            "pg_ctl",
            "-D",
            data.to_str().unwrap(),
            "-m",
            "immediate",
            "stop",
        ]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs one of PostgreSQL's programs (or `taskset` with one), as `postgres` when root.
fn pg(args: &[&str]) {
    let program = match args[0] {
        "taskset" => "/usr/bin/taskset".to_owned(),
        name => format!("{PG_BIN}/{name}"),
    };
    let args: Vec<String> = args
        .iter()
        .enumerate()
        .map(|(i, a)| match (i, args[0]) {
            (3, "taskset") => format!("{PG_BIN}/{a}"),
            _ => (*a).to_owned(),
        })
        .collect();
    let mut command = if cluster::is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &program]);
        c
    } else {
        Command::new(&program)
    };
    let out = command.args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A process's parent and CPU seconds (user + system) from its `stat` file.
fn proc_cpu(path: &str) -> Option<(u32, f64)> {
    let text = std::fs::read_to_string(path).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((ppid, ticks / 100.0))
}

/// The machine's busy and iowait seconds over all cores, from /proc/stat.
fn machine() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<f64> = text
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    let (idle, iowait) = (cpu[3], cpu[4]);
    let total: f64 = cpu.iter().take(8).sum();
    ((total - idle - iowait) / 100.0, iowait / 100.0)
}

struct Args {
    /// `shared`: the servers' processes run on any core; `one`: server K on core K only.
    cores: Vec<String>,
    servers: Vec<usize>,
    concurrency: Vec<usize>,
    jobs: u64,
    rounds: usize,
}

fn list(value: &str) -> Vec<usize> {
    value
        .split(',')
        .map(|v| v.parse().expect("a list of numbers"))
        .collect()
}

fn args() -> Args {
    let mut a = Args {
        cores: vec!["shared".into(), "one".into()],
        servers: vec![1, 2],
        concurrency: vec![1, 16],
        jobs: 60_000,
        rounds: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().expect("each flag takes a value");
        match flag.as_str() {
            "--cores" => a.cores = value.split(',').map(str::to_owned).collect(),
            "--servers" => a.servers = list(&value),
            "--concurrency" => a.concurrency = list(&value),
            "--jobs" => a.jobs = value.parse().expect("a number of jobs"),
            "--rounds" => a.rounds = value.parse().expect("a number of rounds"),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(
        a.cores.iter().all(|c| c == "shared" || c == "one"),
        "--cores takes shared and one"
    );
    assert!(
        a.servers.iter().all(|n| (1..=2).contains(n)),
        "--servers takes 1 and 2"
    );
    a
}

/// One burn-down: jobs/s, then cores busy for each server, the workers, the machine,
/// iowait.
struct Run {
    jobs_per_s: f64,
    servers: Vec<f64>,
    workers: f64,
    machine: f64,
    iowait: f64,
}

async fn burn_down(
    servers: &[Server],
    n: usize,
    concurrency: usize,
    jobs: u64,
    round: usize,
) -> Run {
    let mut pools = Vec::new();
    for server in &servers[..n] {
        pools.push(server.fresh(&format!("r{round}_{n}_{concurrency}")).await);
    }
    let mut router = Router::new(pools.clone()).unwrap();
    for k in 0..n {
        router = router.pin(&format!("q{k}"), k).unwrap();
    }
    let mut next = 0u64;
    while next < jobs {
        let batch: Vec<_> = (next..(next + 1_000).min(jobs))
            .map(|i| SpreadNoop::new(i).with_queue(format!("q{}", i % n as u64)))
            .collect();
        next += batch.len() as u64;
        router.enqueue_many(batch).await.unwrap();
    }
    DONE.store(0, Ordering::SeqCst);
    let cpu0: Vec<f64> = servers[..n].iter().map(Server::cpu).collect();
    let self0 = proc_cpu("/proc/self/stat").unwrap().1;
    let machine0 = machine();
    let started = Instant::now();
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    for pool in router.databases() {
        let worker = Worker::builder(pool.clone())
            .concurrency(concurrency)
            .build()
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stops.push(tx);
        tasks.push(tokio::spawn(worker.run_until(async move {
            let _ = rx.await;
        })));
    }
    while DONE.load(Ordering::SeqCst) < jobs {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu1: Vec<f64> = servers[..n].iter().map(Server::cpu).collect();
    let self1 = proc_cpu("/proc/self/stat").unwrap().1;
    let machine1 = machine();
    for stop in stops {
        let _ = stop.send(());
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let counts = router.client().counts().await.unwrap();
    assert_eq!(counts.available + counts.running, 0, "all ran");
    for pool in pools {
        pool.close().await;
    }
    Run {
        jobs_per_s: jobs as f64 / elapsed,
        servers: cpu0
            .iter()
            .zip(&cpu1)
            .map(|(a, b)| (b - a) / elapsed)
            .collect(),
        workers: (self1 - self0) / elapsed,
        machine: (machine1.0 - machine0.0) / elapsed,
        iowait: (machine1.1 - machine0.1) / elapsed,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let a = args();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "# databases: {} no-op jobs per run, servers {:?}, concurrency {:?} per worker, {} rounds interleaved; {cores} cores",
        a.jobs, a.servers, a.concurrency, a.rounds
    );
    for mode in &a.cores {
        let pinned = mode == "one";
        let servers = [
            Server::start("a", pinned.then_some(0)),
            Server::start("b", pinned.then_some(1 % cores.max(1))),
        ];
        println!(
            "# {}",
            if pinned {
                "each server on one core of its own (taskset), as on hosts of one core; the workers on any"
            } else {
                "the servers' and the workers' processes on any core"
            }
        );
        measure(&a, &servers, cores, if pinned { "one" } else { "shared" }).await;
    }
}

async fn measure(a: &Args, servers: &[Server], cores: usize, mode: &str) {
    let mut runs: Vec<((usize, usize), Vec<Run>)> = Vec::new();
    for round in 0..a.rounds {
        for &c in &a.concurrency {
            for &n in &a.servers {
                let run = burn_down(servers, n, c, a.jobs, round).await;
                eprintln!(
                    "{mode} round {round} servers {n} concurrency {c}: {:.0} jobs/s",
                    run.jobs_per_s
                );
                match runs.iter_mut().find(|(k, _)| *k == (n, c)) {
                    Some((_, all)) => all.push(run),
                    None => runs.push(((n, c), vec![run])),
                }
            }
        }
    }
    for &c in &a.concurrency {
        let one = runs
            .iter()
            .find(|(k, _)| *k == (1, c))
            .map(|(_, r)| median(r.iter().map(|r| r.jobs_per_s).collect()));
        for &n in &a.servers {
            let (_, all) = runs.iter().find(|(k, _)| *k == (n, c)).unwrap();
            let rate = median(all.iter().map(|r| r.jobs_per_s).collect());
            let pick = |f: &dyn Fn(&Run) -> f64| median(all.iter().map(f).collect());
            let per_server: Vec<String> = (0..n)
                .map(|i| format!("{:.2}", pick(&|r: &Run| r.servers[i])))
                .collect();
            println!(
                "servers {n} concurrency {c}: {rate:.0} jobs/s ({:.2}x of one server); cores busy: servers {}, workers {:.2}, machine {:.2} of {cores}, iowait {:.2}",
                one.map_or(f64::NAN, |o| rate / o),
                per_server.join(" + "),
                pick(&|r: &Run| r.workers),
                pick(&|r: &Run| r.machine),
                pick(&|r: &Run| r.iowait),
            );
            println!("databases_{mode}_{n}_c{c}_jobs_per_s {rate:.0}");
        }
    }
}
