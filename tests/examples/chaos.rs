//! The chaos schedule (`sk_tests::chaos`) for as long as you like, on one backend: the long
//! runs behind `docs/reliability.md`. The fault suite runs the same schedule for 45 s.
//!
//! ```text
//! cargo build --release -p sk-tests --bin sk-fault-worker --example chaos
//! target/release/examples/chaos --backend postgres|mysql|sqlite --minutes 30 [--seed N] [--workers 3]
//! ```
//! PostgreSQL from `DATABASE_URL`, MariaDB from `MYSQL_URL` (as the tests). Network faults
//! need root (network namespaces); the database server is restarted during the run. Exits 1
//! when the checker finds a violation, printing the first ones with their histories.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use sk_tests::chaos::{run_schedule, ChaosBackend, Config, Summary};
use sk_tests::Db;

async fn on<B: ChaosBackend>(config: &Config) -> Summary
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let db = Db::<B>::new().await;
    let summary = run_schedule(&db, config).await;
    db.drop().await;
    summary
}

fn value<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value
        .parse()
        .map_err(|_| format!("{flag} {value}: not a number"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let mut backend = "postgres".to_owned();
    let mut minutes = 30.0f64;
    let mut workers = 3usize;
    let mut seed = chrono::Utc::now().timestamp_subsec_nanos() as u64 | 1;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let parsed = match flag.as_str() {
            "--backend" => args
                .next()
                .map(|b| backend = b)
                .ok_or("--backend needs a value".to_owned()),
            "--minutes" => value(&flag, args.next()).map(|m| minutes = m),
            "--workers" => value(&flag, args.next()).map(|w| workers = w),
            "--seed" => value(&flag, args.next()).map(|s| seed = s),
            other => Err(format!("unknown option {other}")),
        };
        if let Err(e) = parsed {
            eprintln!("chaos: {e}");
            return ExitCode::from(2);
        }
    }
    let Some(worker_bin) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("sk-fault-worker")))
        .filter(|bin| bin.exists())
    else {
        eprintln!("chaos: sk-fault-worker is not built beside this program; build both with\n  cargo build --release -p sk-tests --bin sk-fault-worker --example chaos");
        return ExitCode::from(2);
    };
    let config = Config {
        seed,
        duration: Duration::from_secs_f64(minutes * 60.0),
        workers,
        lease: Duration::from_millis(1000),
        worker_bin,
        dir: PathBuf::from(format!("target/tmp/chaos-{backend}-{seed}")),
        network: true,
    };
    let started = Instant::now();
    let summary = match backend.as_str() {
        "postgres" => on::<sqlx::Postgres>(&config).await,
        "mysql" => on::<sqlx::MySql>(&config).await,
        "sqlite" => on::<sqlx::Sqlite>(&config).await,
        other => {
            eprintln!("chaos: no backend {other} (postgres, mysql, sqlite)");
            return ExitCode::from(2);
        }
    };
    println!(
        "chaos-{backend}: seed={seed} faults_for_min={minutes} total_min={:.1} {}",
        started.elapsed().as_secs_f64() / 60.0,
        summary.line()
    );
    for v in summary.violations.iter().take(3) {
        println!("violation: {v}");
    }
    if summary.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
