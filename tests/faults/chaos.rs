//! The chaos schedule on each backend, its whole history checked afterwards.

use super::*;

on_backends! {
    /// The chaos schedule (`sk_tests::chaos`): three workers, each in a network namespace
    /// of its own, an enqueuer and a controller, and a seeded nemesis (kills, pauses past
    /// the lease, partitions both ways and one way, terminated connections, the server
    /// restarted, clocks moved ahead; on SQLite the process faults: kills, pauses,
    /// clocks); the whole history is checked afterwards. `CHAOS_SECONDS` sets how long
    /// faults are injected (default 20; the long runs are `tests/examples/chaos.rs`),
    /// `FAULT_SEED` replays a schedule.
    fn chaos_schedule_history_checks_out => chaos_on [postgres, mysql, sqlite]
}

async fn chaos_on<B: sk_tests::chaos::ChaosBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    let db = Db::<B>::new().await;
    let (_, seed) = Rng::from_env();
    let seconds: u64 = std::env::var("CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = log_dir().join(format!("chaos-{label}"));
    let _ = std::fs::remove_dir_all(&dir);
    let config = sk_tests::chaos::Config {
        seed,
        duration: Duration::from_secs(seconds),
        workers: 3,
        lease: Duration::from_millis(1000),
        worker_bin: WORKER.into(),
        dir,
        network: true,
    };
    let started = Instant::now();
    let summary = sk_tests::chaos::run_schedule(&db, &config).await;
    report(&format!(
        "chaos-{label}: seed={seed} faults_for_s={seconds} total_s={:.1} {}",
        started.elapsed().as_secs_f64(),
        summary.line()
    ));
    assert!(
        summary.violations.is_empty(),
        "{} violations; the first (FAULT_SEED={seed} replays the schedule):\n{}",
        summary.violations.len(),
        summary.violations[0]
    );
    assert!(summary.runs > 0 && summary.faults.values().sum::<usize>() > 0);
    db.drop().await;
}
