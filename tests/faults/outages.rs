//! Outages: connections terminated or killed, a database that goes away, hangs or
//! loses a reply, a worker started before its database, a wrong URL.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_are_reconnected_and_nothing_is_lost() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 10_000;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 5).await;
    let args = [
        "--concurrency",
        "8",
        "--lease-ms",
        "2000",
        "--poll-ms",
        "100",
    ];
    let mut workers = [
        Proc::spawn(&db.url, "term-a", &args),
        Proc::spawn(&db.url, "term-b", &args),
    ];
    let mut terminated = 0;
    for round in 0..3 {
        wait_processed(&db, 1500 + round * 2000, Duration::from_secs(60)).await;
        terminated += <sqlx::Postgres as ChaosBackend>::terminate(&db.pool)
            .await
            .unwrap();
    }
    wait_processed(&db, JOBS as usize, Duration::from_secs(120)).await;
    for w in &mut workers {
        assert!(w.alive(), "{} survived the terminations", w.id);
        w.signal("TERM");
        assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
        let log = w.log_text();
        assert!(
            log.contains("listener connection lost") || log.contains("listener failed"),
            "{} noticed: {log}",
            w.id
        );
    }
    let reran = assert_each_job_finished_once(&db, &ids).await;
    let retried: i64 =
        sqlx::query_scalar("SELECT count(*) FROM sk_task_results_t WHERE task_error_count > 0")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    report(&format!(
        "db-terminate: jobs={JOBS} workers=2 rounds=3 backends_terminated={terminated} lost=0 finalized_twice=0 \
         reran_jobs={reran} jobs_with_a_recorded_error={retried}"
    ));
    db.drop().await;
}

/// MySQL/MariaDB: every connection of the workers killed (`KILL CONNECTION`), three
/// times during a burn-down; the pools replace them and nothing is lost or run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_killed_connections_are_replaced_and_nothing_is_lost() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 10_000;
    let (db, ids) = setup::<sqlx::MySql>(JOBS, 5).await;
    let args = [
        "--concurrency",
        "8",
        "--lease-ms",
        "2000",
        "--poll-ms",
        "100",
    ];
    let mut workers = [
        Proc::spawn(&db.url, "mysql-kill-conn-a", &args),
        Proc::spawn(&db.url, "mysql-kill-conn-b", &args),
    ];
    let mut killed = 0;
    for round in 0..3 {
        wait_processed(&db, 1500 + round * 2000, Duration::from_secs(60)).await;
        killed += <sqlx::MySql as ChaosBackend>::terminate(&db.pool)
            .await
            .unwrap();
    }
    wait_processed(&db, JOBS as usize, Duration::from_secs(120)).await;
    for w in &mut workers {
        assert!(w.alive(), "{} survived the kills", w.id);
        w.signal("TERM");
        assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
    }
    assert!(killed > 0, "connections were killed");
    let reran = assert_each_job_finished_once(&db, &ids).await;
    report(&format!(
        "mysql db-kill: jobs={JOBS} workers=2 rounds=3 connections_killed={killed} lost=0 finalized_twice=0 reran_jobs={reran}"
    ));
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_database_is_away_keeps_trying_without_spinning() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 3000;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 2).await;
    let proxy = Proxy::start().await;
    let via_proxy = db.url.replace(":5432/", &format!(":{}/", proxy.port));
    assert_ne!(via_proxy, db.url, "the test database URL names port 5432");
    let mut w = Proc::spawn(
        &via_proxy,
        "away",
        &[
            "--concurrency",
            "8",
            "--poll-ms",
            "100",
            "--lease-ms",
            "2000",
        ],
    );
    wait_processed(&db, 500, Duration::from_secs(60)).await;

    proxy.switch.down();
    let down_at = processed(&db).await;
    let cpu_before = w.cpu_seconds();
    let outage = Instant::now();
    // Whichever stage meets the outage first reports it: the claim when slots are free,
    // the completer when every slot holds a finished job waiting to be recorded.
    wait_until(
        "the worker to log failed database calls",
        Duration::from_secs(30),
        || async { (w.log_text().matches(", retrying in ").count() >= 3).then_some(()) },
    )
    .await;
    fault_pause(Duration::from_secs(3)).await; // the outage goes on
    let outage_s = outage.elapsed().as_secs_f64();
    let cpu = w.cpu_seconds() - cpu_before;
    assert!(
        w.alive(),
        "the worker did not exit while the database was away"
    );
    assert!(
        cpu < 0.25 * outage_s,
        "the worker spun: {cpu:.2} s CPU in {outage_s:.1} s"
    );
    let log = w.log_text();
    let failures = log.matches(", retrying in ").count();
    assert!(
        log.contains(&format!(
            "cannot reach the database at 127.0.0.1:{}/",
            proxy.port
        )),
        "the outage is named in sk's words, with the address: {log}"
    );
    assert!(
        log.contains("retrying in 100 ms") && log.contains("retrying in 200 ms"),
        "backoff grows: {log}"
    );

    // Then a database that does not answer at all: the pool's connections time out
    // (its acquire timeout, 5 s), and every line that meets it names the cause, in sk's
    // words, never a bare "pool timed out" (the stored schedules' read and the
    // listener's reconnect said only that).
    proxy.switch.hang();
    let hung_from = w.log_text().len();
    wait_until(
        "the stored schedules' read to meet the pool's timeout",
        Duration::from_secs(30),
        || async {
            w.log_text()[hung_from..]
                .lines()
                .any(|l| {
                    l.contains("cannot read the stored schedules") && l.contains("no answer within")
                })
                .then_some(())
        },
    )
    .await;
    let log = w.log_text();
    let bare: Vec<&str> = log[hung_from..]
        .lines()
        .filter(|l| l.contains("pool timed out") && !l.contains("cannot reach the database"))
        .collect();
    assert!(
        bare.is_empty(),
        "a pool timeout without its cause: {bare:#?}"
    );

    proxy.switch.restore();
    wait_processed(&db, JOBS as usize, Duration::from_secs(60)).await;
    w.signal("TERM");
    assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
    assert!(
        w.log_text().contains(" again after "),
        "the recovery is logged"
    );
    let reran = assert_each_job_finished_once(&db, &ids).await;
    report(&format!(
        "db-away: jobs={JOBS} processed_before_outage={down_at} outage_s={outage_s:.1} retries_logged={failures} \
         cpu_s_during_outage={cpu:.3} lost=0 finalized_twice=0 reran_jobs={reran}"
    ));
    db.drop().await;
}

/// The reply to a completion's COMMIT is lost on its way back (the connection closes
/// after the server committed): the worker retries the write, finds its own results
/// already recorded, and says so; it neither counts them as fenced nor runs them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_commit_reply_is_lost_is_recorded_once() {
    lose_a_commit_reply("lost-commit-reply", &[]).await;
}

/// As above under a retention of zero, where the successes leave no results row to find:
/// the worker asks the server whether the completion's transaction committed
/// (`pg_xact_status`), and knows its own successes as surely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_without_a_record_whose_commit_reply_is_lost_is_known_once() {
    lose_a_commit_reply("lost-commit-reply-no-history", &["--retention-ms", "0"]).await;
}

/// Runs `JOBS` jobs through a proxy that loses one completion's COMMIT reply, with the
/// worker's `options`, and checks what it recognised and what the tables hold.
async fn lose_a_commit_reply(name: &str, options: &[&str]) {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 200;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 1).await;
    let proxy = Proxy::start().await;
    let via_proxy = db.url.replace(":5432/", &format!(":{}/", proxy.port));
    proxy.lose_a_commit_reply();
    let mut args = vec!["--concurrency", "4", "--poll-ms", "100"];
    args.extend_from_slice(options);
    let mut w = Proc::spawn(&via_proxy, "lost-reply", &args);
    wait_until(
        "a completion's COMMIT reply to be lost",
        Duration::from_secs(30),
        || async { proxy.lost_a_commit_reply().then_some(()) },
    )
    .await;
    let history = options.is_empty();
    if history {
        wait_processed(&db, JOBS as usize, Duration::from_secs(60)).await;
    } else {
        wait_until("the queue to empty", Duration::from_secs(60), || async {
            let left = db
                .scalar("SELECT count(*) FROM sk_tasks_queue_t", None)
                .await?;
            (left == 0).then_some(())
        })
        .await;
    }
    w.signal("TERM");
    assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
    let log = w.log_text();
    let recognised = log
        .matches(
            "the job's result was recorded by an earlier try, whose reply was lost; recorded once",
        )
        .count();
    assert!(
        recognised >= 1,
        "the retried completion recognised its own results: {log}"
    );
    assert!(
        !log.contains("no longer holds the job's lease"),
        "its own results were taken for a lost lease: {log}"
    );
    let fenced = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = 'lost-reply' AND metric_id = 'jobs_fenced'",
            None,
        )
        .await;
    assert_eq!(fenced.unwrap_or(0), 0, "no result counted as fenced");
    let reran = if history {
        assert_each_job_finished_once(&db, &ids).await
    } else {
        let db = &db;
        let count = |sql: &'static str| async move { db.scalar(sql, None).await.expect("a count") };
        assert_eq!(
            count("SELECT count(*) FROM sk_task_results_t").await,
            0,
            "no record"
        );
        assert_eq!(
            count("SELECT count(DISTINCT task_id) FROM fault_runs").await,
            i64::from(JOBS),
            "every job ran"
        );
        count("SELECT count(*) FROM fault_runs").await - i64::from(JOBS)
    };
    assert_eq!(reran, 0, "no job ran twice");
    report(&format!(
        "{name}: jobs={JOBS} results_recognised={recognised} fenced=0 reran=0"
    ));
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_its_database_names_the_cause_and_waits() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 200;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 1).await;
    // A port where nothing listens yet; the database appears there later.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = db.url.replace(":5432/", &format!(":{port}/"));
    let spawned = Instant::now();
    let mut w = Proc::spawn(&url, "early", &["--concurrency", "8"]);
    let (first, after) = wait_until("the first sk log line", Duration::from_secs(10), || async {
        let log = w.log_text();
        let line = log.lines().find(|l| l.contains(" sk: "))?.to_owned();
        Some((line, spawned.elapsed()))
    })
    .await;
    assert!(
        after < Duration::from_secs(1),
        "the first line came after {after:?}: {first}"
    );
    assert!(
        first.contains(&format!(
            "sk: cannot reach the database at 127.0.0.1:{port}/"
        )) && first.contains("Connection refused")
            && first.contains("retrying in"),
        "the first line names the address and the cause: {first}"
    );
    fault_pause(Duration::from_secs(3)).await; // the database is not there yet
    assert!(w.alive(), "the worker waits for the database");
    let _proxy = Proxy::start_on(port).await;
    let appeared = Instant::now();
    wait_processed(&db, JOBS as usize, Duration::from_secs(30)).await;
    let came_up = appeared.elapsed().as_secs_f64();
    let log = w.log_text();
    assert!(
        log.contains(" answers after "),
        "the recovery is logged: {log}"
    );
    assert!(
        !log.contains("sqlx::postgres::notice") && !log.contains("job succeeded"),
        "no server notices at start and no line per successful job at INFO: {log}"
    );
    w.signal("TERM");
    assert_eq!(w.exit_code(Duration::from_secs(10)).await, Some(0));
    assert_each_job_finished_once(&db, &ids).await;
    report(&format!(
        "database late: first sk line {:.0} ms after start ({}), {} waiting lines; all {JOBS} jobs done {came_up:.1} s after the database appeared",
        after.as_secs_f64() * 1000.0,
        first.split(" sk: ").nth(1).unwrap_or(&first),
        log.matches("sk: cannot reach the database").count()
    ));
    db.drop().await;
}

#[tokio::test]
async fn a_wrong_database_url_is_a_one_line_error() {
    for (url, cause) in [
        (
            "postgres://postgres@127.0.0.1:1/nowhere",
            "Connection refused",
        ),
        (
            "postgres://nobody@127.0.0.1:5432/nowhere",
            "role \"nobody\" does not exist",
        ),
        ("not a url", "relative URL without a base"),
    ] {
        let out = Command::new(WORKER)
            .env("DATABASE_URL", url)
            .args(["--start-timeout-ms", "0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{url}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "one line for {url}: {stderr}"
        );
        assert!(stderr.starts_with("sk-fault-worker: "), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains(cause), "the cause is named: {stderr}");
        report(&format!("bad-url: {url:?} -> {}", stderr.trim()));
    }
}
