//! Workers on many hosts: N worker processes, each in its own network namespace joined to
//! the database by a veth pair and a relay that delays every packet's bytes, as separate
//! hosts on a network would be.
//!
//! ```text
//! sudo target/release/scale [--hosts 1,2,4,8] [--jobs 40000] [--concurrency 64]
//!     [--delay-us 500] [--latency-jobs 300]
//! ```
//! Linux only, and root (it makes namespaces `sk-scale-K` and veth pairs `sksK`/`sknK`
//! with `ip`, and removes them at the end). The database is the PostgreSQL at
//! `DATABASE_URL` (default the local one), in schema `sk_scale`, recreated per N.
//!
//! Host K reaches the database at 10.213.K.1:5432, where a relay in this process forwards
//! to the server and holds every chunk `--delay-us` in each direction (the kernel's
//! `netem` qdisc would do this on the veth, but not every kernel has it; the relay's
//! delay is measured and printed). Per N it prints:
//! - `jobs_per_s`: a backlog of `--jobs` no-op jobs burned down by the N workers (each
//!   at `--concurrency`), from the first claim to the last result;
//! - `pickup_p50/p95/p99`: with the workers idle, jobs enqueued one at a time at random
//!   5-50 ms gaps; from just before the enqueue to the handler's first line;
//! - `lock_waits`: the share of the workers' active database sessions seen waiting on a
//!   lock (pg_stat_activity, sampled every 20 ms during the burn-down): what claim
//!   conflicts cost (SKIP LOCKED skips a locked row instead of waiting on it);
//!   `twice`: jobs with an attempt recorded before the one that finished (a lease lost,
//!   the job claimed again: work done twice; 0 expected);
//! - CPU, in cores busy during the burn-down: the PostgreSQL processes, the workers, this
//!   process (relays) and the machine as a whole; the resource that ran out is the one
//!   near the machine's core count.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use sk_runtime::{job, Enqueue, Schema, Worker};

#[path = "support.rs"]
mod support;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const SCHEMA: &str = "sk_scale";

#[job]
async fn scale_noop(n: u64) {
    let _ = n;
}

/// Prints the time from its enqueue to its start, in µs, for the parent to read.
#[job]
async fn scale_ping(sent_micros: i64) {
    println!("{}", now_micros() - sent_micros);
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

struct Args {
    hosts: Vec<usize>,
    jobs: u64,
    concurrency: usize,
    delay: Duration,
    latency_jobs: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        hosts: vec![1, 2, 4, 8],
        jobs: 40_000,
        concurrency: 64,
        delay: Duration::from_micros(500),
        latency_jobs: 300,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--hosts" => {
                a.hosts = value
                    .split(',')
                    .map(|n| match n.parse::<usize>() {
                        Ok(n @ 1..=200) => Ok(n),
                        _ => Err(format!("--hosts {value}: each a number from 1 to 200")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--jobs" => a.jobs = num()?,
            "--concurrency" => a.concurrency = num()?.max(1) as usize,
            "--delay-us" => a.delay = Duration::from_micros(num()?),
            "--latency-jobs" => a.latency_jobs = num()?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let mut argv = std::env::args().skip(1);
    let result = if argv.next().as_deref() == Some("--worker") {
        worker(argv.collect()).await
    } else {
        run().await
    };
    if let Err(e) = result {
        eprintln!("scale: {e}");
        std::process::exit(1);
    }
}

/// One host's worker: `--worker URL CONCURRENCY`, until its stdin closes.
async fn worker(argv: Vec<String>) -> Result<(), BoxError> {
    let [url, concurrency] = &argv[..] else {
        return Err("usage: scale --worker URL CONCURRENCY".into());
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(6)
        .connect(url)
        .await?;
    let worker = Worker::builder(pool)
        .schema(Schema::new(SCHEMA, "sk_")?)
        .task_types(["scale_noop", "scale_ping"])
        .concurrency(concurrency.parse()?)
        .build()?;
    worker
        .run_until(async {
            // The parent closes our stdin to stop us.
            let _ = tokio::task::spawn_blocking(|| std::io::stdin().read(&mut [0; 1])).await;
        })
        .await?;
    // Memory after the run, for the parent (its pings print plain numbers).
    println!("rss_kb {}", support::rss_kb().unwrap_or(-1));
    Ok(())
}

async fn run() -> Result<(), BoxError> {
    let args = args()?;
    let (pool, _) = support::fresh_schema(SCHEMA, 4).await?;
    let direct = round_trip(&pool).await?;
    println!(
        "# {} no-op jobs per N, concurrency {} per worker, delay {} µs each way; {} cores",
        args.jobs,
        args.concurrency,
        args.delay.as_micros(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "# SELECT 1 round trip, direct: {:.3} ms through a pool, {:.3} ms on a held connection",
        direct.0 * 1e3,
        direct.1 * 1e3
    );
    let mut first = None;
    // The hosts are made once for the largest N (a relay's listener lives as long as the
    // process); each N uses the first N.
    let net = Net::up(args.hosts.iter().copied().max().unwrap_or(1), args.delay)?;
    for &n in &args.hosts {
        let (pool, schema) = support::fresh_schema(SCHEMA, 4).await?;
        let via = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&net.url(0))
            .await?;
        let relayed = round_trip(&via).await?;
        via.close().await;
        // The same pool without its ping before each acquire.
        let via = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect(&net.url(0))
            .await?;
        let untested = round_trip(&via).await?.0;
        via.close().await;
        let mut i = 0;
        while i < args.jobs {
            let chunk: Vec<_> = (i..(i + 10_000).min(args.jobs))
                .map(|k| Enqueue::new(ScaleNoop::new(k)).with_schema(&schema))
                .collect();
            i += chunk.len() as u64;
            ScaleNoop::enqueue_many(&pool, chunk).await?;
        }
        sqlx::query(&format!("VACUUM ANALYZE {SCHEMA}.sk_tasks_queue_t"))
            .execute(&pool)
            .await?;
        let cpu = Cpu::read();
        let mut workers = Workers::start(&net, n, args.concurrency)?;
        let (mut waiting, mut active) = (0i64, 0i64);
        // What the sessions waiting on a lock wait for, and in which statement.
        let mut waits = std::collections::HashMap::<String, i64>::new();
        let done_at = Instant::now() + Duration::from_secs(600);
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let (left, a, w): (bool, i64, Vec<String>) = sqlx::query_as(&format!(
                "SELECT EXISTS (SELECT 1 FROM {SCHEMA}.sk_tasks_queue_t),
                        count(*) FILTER (WHERE state = 'active'),
                        coalesce(array_agg(wait_event || ' in ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 70))
                            FILTER (WHERE wait_event_type = 'Lock'), '{{}}')
                 FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND client_addr IS NOT NULL"
            ))
            .fetch_one(&pool)
            .await?;
            waiting += w.len() as i64;
            active += a;
            for wait in w {
                *waits.entry(wait).or_default() += 1;
            }
            if !left {
                break;
            }
            if Instant::now() > done_at {
                return Err("the burn-down took more than 10 minutes".into());
            }
            workers.check()?;
        }
        let cpu = cpu.since(&workers.pids());
        let (done, seconds, twice): (i64, f64, i64) = sqlx::query_as(&format!(
            "SELECT count(*),
                    extract(epoch FROM max(task_processing_finalized_at_ts)
                                     - min(task_first_processing_attempted_at_ts))::float8,
                    count(*) FILTER (WHERE jsonb_array_length(task_errors) > 0)
             FROM {SCHEMA}.sk_task_results_t WHERE task_status = 3"
        ))
        .fetch_one(&pool)
        .await?;
        if done != args.jobs as i64 {
            return Err(format!("N={n}: {done} of {} jobs finished", args.jobs).into());
        }
        let rate = args.jobs as f64 / seconds;
        let latency = pickup(&pool, &schema, &workers, args.latency_jobs).await?;
        let rss_mb = workers.stop()? as f64 / 1024.0;
        let base = *first.get_or_insert(rate);
        let lock_waits = if active > 0 {
            100.0 * waiting as f64 / active as f64
        } else {
            0.0
        };
        println!(
            "hosts {n}: {rate:.0} jobs/s ({:.2}x of 1 host, {:.0} per host); pickup p50 {:.2} p95 {:.2} p99 {:.2} ms; \
             lock waits {lock_waits:.1} % of active sessions; {twice} run twice; \
             cores busy: postgres {:.2}, workers {:.2}, relays {:.2}, machine {:.2} (iowait {:.2}); \
             largest worker {rss_mb:.0} MB resident; relayed SELECT 1 {:.3} ms through a pool \
             ({:.3} ms without the ping before acquire), {:.3} ms on a held connection",
            rate / base,
            rate / n as f64,
            latency[0],
            latency[1],
            latency[2],
            cpu.postgres,
            cpu.workers,
            cpu.relay,
            cpu.busy,
            cpu.iowait,
            relayed.0 * 1e3,
            untested * 1e3,
            relayed.1 * 1e3,
        );
        let mut waits: Vec<_> = waits.into_iter().collect();
        waits.sort_by_key(|w| std::cmp::Reverse(w.1));
        for (wait, samples) in waits.iter().take(3) {
            println!("#   {samples} samples waiting on {wait}");
        }
        for (name, value, unit) in [
            ("jobs_per_s", rate, "jobs/s"),
            ("pickup_p50", latency[0], "ms"),
            ("pickup_p95", latency[1], "ms"),
            ("pickup_p99", latency[2], "ms"),
            ("lock_waits", lock_waits, "%"),
            ("cores_postgres", cpu.postgres, "cores"),
            ("cores_workers", cpu.workers, "cores"),
            ("cores_relays", cpu.relay, "cores"),
            ("cores_busy", cpu.busy, "cores"),
            ("worker_rss", rss_mb, "MB"),
        ] {
            println!("scale_{n}_{name} {value:.2} {unit}");
        }
    }
    Ok(())
}

/// Median of 200 `SELECT 1`, in seconds: through the pool (each takes a connection from
/// it), and on one connection held throughout.
async fn round_trip(pool: &sqlx::PgPool) -> Result<(f64, f64), BoxError> {
    let median = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let mut t = Vec::new();
    for _ in 0..200 {
        let start = Instant::now();
        sqlx::query("SELECT 1").execute(pool).await?;
        t.push(start.elapsed().as_secs_f64());
    }
    let through_pool = median(t);
    let mut conn = pool.acquire().await?;
    let mut t = Vec::new();
    for _ in 0..200 {
        let start = Instant::now();
        sqlx::query("SELECT 1").execute(&mut *conn).await?;
        t.push(start.elapsed().as_secs_f64());
    }
    Ok((through_pool, median(t)))
}

/// Jobs enqueued one at a time at random gaps to idle workers; p50, p95, p99 in ms of
/// the time from just before each enqueue to its handler's start.
async fn pickup(
    pool: &sqlx::PgPool,
    schema: &Schema,
    workers: &Workers,
    n: u64,
) -> Result<[f64; 3], BoxError> {
    if n == 0 {
        return Ok([0.0; 3]);
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        tokio::time::sleep(Duration::from_millis(5 + rng % 46)).await;
        Enqueue::new(ScalePing::new(now_micros()))
            .with_schema(schema)
            .enqueue(pool)
            .await?;
    }
    let mut ms = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    while (ms.len() as u64) < n {
        let left = until.saturating_duration_since(Instant::now());
        let micros = workers
            .pings
            .recv_timeout(left)
            .map_err(|_| format!("{} of {n} latency jobs ran within 30 s", ms.len()))?;
        ms.push(micros as f64 / 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    let pick = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    Ok([pick(0.5), pick(0.95), pick(0.99)])
}

/// The namespaces, veth pairs and relays of N hosts; removed when dropped.
struct Net {
    hosts: usize,
}

impl Net {
    fn up(hosts: usize, delay: Duration) -> Result<Net, BoxError> {
        let net = Net { hosts };
        net.remove();
        for k in 0..hosts {
            let (ns, host_if, ns_if) = Net::names(k);
            let host_ip = format!("10.213.{k}.1");
            let ns_ip = format!("10.213.{k}.2");
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
            ])?;
            ip(&["link", "set", &ns_if, "netns", &ns])?;
            ip(&["addr", "add", &format!("{host_ip}/24"), "dev", &host_if])?;
            ip(&["link", "set", &host_if, "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{ns_ip}/24"),
                "dev",
                &ns_if,
            ])?;
            ip(&["-n", &ns, "link", "set", &ns_if, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            relay(TcpListener::bind((host_ip.as_str(), 5432))?, delay);
        }
        Ok(net)
    }

    fn names(k: usize) -> (String, String, String) {
        (
            format!("sk-scale-{k}"),
            format!("sks{k}"),
            format!("skn{k}"),
        )
    }

    /// Host K's database URL, through its relay.
    fn url(&self, k: usize) -> String {
        format!("postgres://postgres@10.213.{k}.1:5432/postgres")
    }

    /// Removing a namespace removes its end of the veth pair, and with it the other.
    fn remove(&self) {
        for k in 0..self.hosts.max(200) {
            let (ns, host_if, _) = Net::names(k);
            if std::path::Path::new(&format!("/run/netns/{ns}")).exists() {
                let _ = ip(&["netns", "del", &ns]);
            }
            if std::path::Path::new(&format!("/sys/class/net/{host_if}")).exists() {
                let _ = ip(&["link", "del", &host_if]);
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.remove();
    }
}

fn ip(args: &[&str]) -> Result<(), BoxError> {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {} (this program needs root and iproute2)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// Forwards each connection to `listener` to the database, every chunk held `delay` in
/// each direction (blocking threads: a thread's sleep is precise to tens of µs, a tokio
/// timer only to a millisecond). The listener lives as long as the process; its address
/// goes with the veth.
fn relay(listener: TcpListener, delay: Duration) {
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect("127.0.0.1:5432") else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            if let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) {
                pump(client, s2, delay);
                pump(server, c2, delay);
            }
        }
    });
}

/// Copies `from` to `to`, each chunk written `delay` after it was read.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = std_mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            if tx
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                break;
            }
        }
        let _ = from.shutdown(std::net::Shutdown::Read);
    });
    std::thread::spawn(move || {
        for (due, bytes) in rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

/// The worker processes, one per host, each run inside its namespace, and what their
/// latency jobs print.
struct Workers {
    children: Vec<Child>,
    pings: std_mpsc::Receiver<i64>,
    /// Each worker's output reader, ending with the memory it reported last.
    readers: Vec<std::thread::JoinHandle<Option<i64>>>,
}

impl Workers {
    fn start(net: &Net, hosts: usize, concurrency: usize) -> Result<Workers, BoxError> {
        let exe = std::env::current_exe()?;
        let (mut children, mut readers) = (Vec::new(), Vec::new());
        let (tx, pings) = std_mpsc::channel();
        for k in 0..hosts.min(net.hosts) {
            let (ns, _, _) = Net::names(k);
            // `ip netns exec` enters the namespace and executes the program in place, so
            // the child's pid is the worker's.
            children.push(
                Command::new("ip")
                    .args(["netns", "exec", &ns])
                    .arg(&exe)
                    .args(["--worker", &net.url(k), &concurrency.to_string()])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()?,
            );
            let out = children
                .last_mut()
                .and_then(|c| c.stdout.take())
                .ok_or("no stdout")?;
            let tx = tx.clone();
            readers.push(std::thread::spawn(move || {
                let mut rss = None;
                for line in
                    std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok)
                {
                    if let Some(kb) = line.strip_prefix("rss_kb ") {
                        rss = kb.trim().parse().ok();
                    } else if let Ok(micros) = line.trim().parse() {
                        let _ = tx.send(micros);
                    }
                }
                rss
            }));
        }
        Ok(Workers {
            children,
            pings,
            readers,
        })
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// An error if a worker exited.
    fn check(&mut self) -> Result<(), BoxError> {
        for child in &mut self.children {
            if let Some(status) = child.try_wait()? {
                return Err(format!("a worker exited early: {status}").into());
            }
        }
        Ok(())
    }

    /// Closes each worker's stdin (a graceful stop) and waits for it; the largest
    /// resident memory a worker reported at its end, in kB.
    fn stop(mut self) -> Result<i64, BoxError> {
        for child in &mut self.children {
            drop(child.stdin.take());
        }
        for child in &mut self.children {
            let status = child.wait()?;
            if !status.success() {
                return Err(format!("a worker stopped with {status}").into());
            }
        }
        let mut largest = 0;
        for reader in self.readers {
            let rss = reader.join().map_err(|_| "a worker's reader panicked")?;
            largest = largest.max(rss.ok_or("a worker did not report its memory")?);
        }
        Ok(largest)
    }
}

/// CPU time, from /proc: the machine's, and per process.
struct Cpu {
    at: Instant,
    machine: (u64, u64),
    procs: Vec<(u32, String, u64)>,
}

/// Cores busy over an interval.
struct CoresBusy {
    postgres: f64,
    workers: f64,
    relay: f64,
    busy: f64,
    iowait: f64,
}

impl Cpu {
    /// Clock ticks per second of /proc's counters (USER_HZ, 100 on Linux).
    const HZ: f64 = 100.0;

    fn read() -> Cpu {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let fields: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        let get = |i: usize| fields.get(i).copied().unwrap_or(0);
        // user nice system idle iowait irq softirq steal
        let busy = get(0) + get(1) + get(2) + get(5) + get(6) + get(7);
        let mut procs = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let comm = stat[open + 1..close].to_owned();
            let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
            let ticks = rest
                .get(11)
                .and_then(|u| u.parse::<u64>().ok())
                .unwrap_or(0)
                + rest
                    .get(12)
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0);
            procs.push((pid, comm, ticks));
        }
        Cpu {
            at: Instant::now(),
            machine: (busy, get(4)),
            procs,
        }
    }

    fn since(&self, workers: &[u32]) -> CoresBusy {
        let now = Cpu::read();
        let seconds = now.at.duration_since(self.at).as_secs_f64().max(1e-3);
        let me = std::process::id();
        let (mut postgres, mut work, mut relay) = (0u64, 0u64, 0u64);
        for (pid, comm, ticks) in &now.procs {
            let before = self
                .procs
                .iter()
                .find(|(p, c, _)| p == pid && c == comm)
                .map_or(0, |(_, _, t)| *t);
            let used = ticks.saturating_sub(before);
            if comm == "postgres" {
                postgres += used;
            } else if workers.contains(pid) {
                work += used;
            } else if *pid == me {
                relay += used;
            }
        }
        let cores = |ticks: u64| ticks as f64 / Cpu::HZ / seconds;
        CoresBusy {
            postgres: cores(postgres),
            workers: cores(work),
            relay: cores(relay),
            busy: cores(now.machine.0.saturating_sub(self.machine.0)),
            iowait: cores(now.machine.1.saturating_sub(self.machine.1)),
        }
    }
}
