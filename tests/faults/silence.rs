//! A host that goes silent: its packets dropped, not refused, in a network namespace of
//! the test's own. The worker runs in the namespace and reaches PostgreSQL by two links,
//! each to a proxy of its own on the host end, listed as two hosts of a replicated
//! cluster (`primary_pool`); the first link's silence is a primary whose host stops
//! answering, the second the standby that takes over (here the same server, so nothing
//! is promoted: what is measured is sk's side of a failover).

use sk_tests::netns::Links;

use super::*;

/// The fault worker's arguments for these tests: transaction jobs, 8 at a time.
fn worker_args(lease_ms: u64, bound_ms: u64, grace_ms: u64) -> Vec<String> {
    [
        "--job",
        "effect",
        "--concurrency",
        "8",
        "--lease-ms",
        &lease_ms.to_string(),
        "--call-timeout-ms",
        &bound_ms.to_string(),
        "--grace-ms",
        &grace_ms.to_string(),
        "--poll-ms",
        "100",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// SIGTERM to `w`; asserts it exits cleanly within `grace_ms` and a second, and returns
/// how long it took, in seconds.
async fn stop_within_grace(w: &mut Proc, grace_ms: u64) -> f64 {
    w.signal("TERM");
    let stopping = Instant::now();
    let code = w
        .exit_code(Duration::from_millis(grace_ms) + Duration::from_secs(5))
        .await;
    let stop_s = stopping.elapsed().as_secs_f64();
    assert_eq!(code, Some(0), "{}", w.log_text());
    assert!(
        stop_s <= grace_ms as f64 / 1000.0 + 1.0,
        "SIGTERM on a silent network exited after {stop_s:.2} s (grace {grace_ms} ms)"
    );
    stop_s
}

/// The server's clock, for comparing with the runs' `started_at`.
async fn server_now(db: &Db<sqlx::Postgres>) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// The first host goes silent while jobs run in their own transactions, some of them
/// in an application statement on it. The worker moves to the second host, gives up the
/// runs stuck on the first (they cannot commit there) and hands their leases back, so
/// no job is held longer than its lease and the bound; an enqueue on the silent host
/// returns an error within its bound; then both hosts go silent and a SIGTERM exits
/// within the grace period and a second. Every job ends once, with one write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_primary_holds_no_job_past_its_lease_and_the_bound() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 64;
    const WORK_MS: u64 = 1500;
    const LEASE_MS: u64 = 3000;
    const BOUND_MS: u64 = 1000;
    const GRACE_MS: u64 = 2000;
    let db = Db::<sqlx::Postgres>::new().await;
    db.execute(fault_runs::<sqlx::Postgres>()).await;
    db.execute("CREATE TABLE fault_effects (task_id uuid NOT NULL)")
        .await;
    let mut ids = EffectPg::enqueue_many(&db.pool, (0..JOBS).map(|_| EffectPg::new(WORK_MS)))
        .await
        .unwrap();

    let links = Links::create();
    let (first, second) = (
        Proxy::start_at(links.host_ip(0), 0).await,
        Proxy::start_at(links.host_ip(1), 0).await,
    );
    let hosts = format!(
        "{}:{},{}:{}",
        links.host_ip(0),
        first.port,
        links.host_ip(1),
        second.port
    );
    let url = format!(
        "{}?target_session_attrs=read-write",
        db.url.replacen("127.0.0.1:5432", &hosts, 1)
    );
    assert_ne!(url, db.url, "the test database URL names 127.0.0.1:5432");
    let owned = worker_args(LEASE_MS, BOUND_MS, GRACE_MS);
    let args: Vec<&str> = owned.iter().map(String::as_str).collect();
    let mut w = Proc::spawn_in(Some(links.ns()), &url, "silent-a", &args);
    wait_until("16 runs started", Duration::from_secs(60), || async {
        let n = db.scalar("SELECT count(*) FROM fault_runs", None).await?;
        (n >= 16).then_some(())
    })
    .await;

    // An enqueuer on the first host, as the host goes silent (here, its proxy keeps
    // every connection open and passes nothing).
    let enqueuer = Proxy::start().await;
    let enqueue_url = db.url.replace(":5432/", &format!(":{}/", enqueuer.port));
    let client = sk_runtime::Pool::connect(&enqueue_url).await.unwrap();
    let sk_runtime::Pool::Postgres(client) = client else {
        panic!("a PostgreSQL pool")
    };
    // (No worker here runs `burn`: what the enqueuer stores stays queued.)
    Burn::new(1).enqueue(&client).await.unwrap();

    // The primary's host dies in silence: no packet of the first link passes, and its
    // server sessions end (their transactions roll back, as on a host that is gone).
    let silent_at = server_now(&db).await;
    let silenced = Instant::now();
    let held: Vec<(Uuid, DateTime<Utc>)> = sqlx::query_as(
        "SELECT task_id, task_claimed_at_ts FROM sk_tasks_queue_t WHERE task_locked_by = 'silent-a'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        !held.is_empty(),
        "the worker holds jobs as its host goes silent"
    );
    links.silence(0, true);
    first.switch.down();
    enqueuer.switch.freeze();
    // Two at once: one on the connection the pool holds (its write is cut: the outcome
    // is unknown), one on a new connection (cut before anything was sent: not stored).
    let enqueues: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let asked = Instant::now();
                let outcome = Burn::new(1).enqueue(&client).await;
                (asked.elapsed(), outcome.map_err(|e| e.to_string()))
            })
        })
        .collect();

    // How long each job held at the silence stays held by the claim it had then: until
    // that lease is handed back, another claim takes the job, or the job ends. (A lease
    // that merely ran out is still held: nothing stops its worker from extending it
    // again, as a heartbeat on the new host did.)
    let mut holding = held.clone();
    let mut released = Vec::new();
    while !holding.is_empty() {
        assert!(
            silenced.elapsed() < Duration::from_secs(60),
            "{} jobs still held 60 s after the silence",
            holding.len()
        );
        let (ids, claims): (Vec<Uuid>, Vec<DateTime<Utc>>) = holding.iter().copied().unzip();
        let still: Vec<(Uuid, DateTime<Utc>)> = sqlx::query_as(
            "SELECT q.task_id, q.task_claimed_at_ts FROM sk_tasks_queue_t q
               JOIN unnest($1::uuid[], $2::timestamptz[]) AS h(id, claimed)
                 ON q.task_id = h.id AND q.task_claimed_at_ts = h.claimed
              WHERE q.task_locked_by = 'silent-a'",
        )
        .bind(&ids)
        .bind(&claims)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let now = silenced.elapsed().as_secs_f64();
        released.extend(holding.iter().filter(|h| !still.contains(h)).map(|_| now));
        holding = still;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let longest = released.iter().copied().fold(0.0, f64::max);

    // Every job runs to its end on the second host.
    wait_processed(&db, JOBS as usize, Duration::from_secs(90)).await;
    let resumed: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM min(started_at) - $1)::float8 FROM fault_runs WHERE started_at > $1",
    )
    .bind(silent_at)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let log = w.log_text();
    assert!(
        log.contains("the writable PostgreSQL host moved"),
        "the move is logged: {log}"
    );
    let given_up: usize = log
        .lines()
        .filter(|l| l.contains("which the primary moved away from"))
        .filter_map(|l| {
            l.split("jobs=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    assert!(
        given_up > 0,
        "the runs stuck on the silent host were given up: {log}"
    );
    // Held no longer than the lease and the bound, after the move (the watch's
    // `ANSWER_WITHIN`, 2 s, twice, plus its look every 0.5 s) and a heartbeat.
    let limit = (LEASE_MS + BOUND_MS) as f64 / 1000.0 + 5.5;
    assert!(
        longest <= limit,
        "a job held at the silence was held {longest:.1} s after it (limit {limit:.1} s)"
    );
    let long_lines: Vec<&str> = log.lines().filter(|l| l.len() > 600).collect();
    assert!(
        long_lines.is_empty(),
        "log lines over 600 characters: {long_lines:#?}"
    );

    let mut enqueued = Vec::new();
    for call in enqueues {
        enqueued.push(
            tokio::time::timeout(Duration::from_secs(60), call)
                .await
                .expect("the enqueues on a silent host returned")
                .unwrap(),
        );
    }
    for (took, outcome) in &enqueued {
        let e = outcome
            .as_ref()
            .expect_err("an enqueue on a silent host fails");
        assert!(
            *took < sk_runtime::bounds::CALL_TIMEOUT + Duration::from_secs(2),
            "the enqueue returned after {took:?}: {e}"
        );
        assert!(
            e.contains("did not finish within 10s")
                && (e.contains("not stored") || e.contains("is unknown")),
            "the error says whether the job was stored: {e}"
        );
    }

    // Then both hosts silent, with jobs running: the stop keeps its deadline.
    let more = EffectPg::enqueue_many(&db.pool, (0..16).map(|_| EffectPg::new(WORK_MS)))
        .await
        .unwrap();
    let before = db
        .scalar("SELECT count(*) FROM fault_runs", None)
        .await
        .unwrap();
    wait_until("the new jobs to start", Duration::from_secs(30), || async {
        let n = db.scalar("SELECT count(*) FROM fault_runs", None).await?;
        (n >= before + 4).then_some(())
    })
    .await;
    links.silence(1, true);
    second.switch.down();
    let stop_s = stop_within_grace(&mut w, GRACE_MS).await;

    // The rest by a worker on the host itself.
    first.switch.restore();
    second.switch.restore();
    let mut rest = Proc::spawn(&db.url, "silent-b", &args);
    ids.extend(more);
    wait_processed(&db, ids.len(), Duration::from_secs(60)).await;
    rest.signal("TERM");
    assert_eq!(rest.exit_code(Duration::from_secs(30)).await, Some(0));
    let effect_jobs = ids.len() as i64;
    {
        let db = &db;
        let count = |sql: &'static str| async move { db.scalar(sql, None).await.expect("a count") };
        assert_eq!(
            (
                count("SELECT count(*) FROM fault_effects").await,
                count("SELECT count(DISTINCT task_id) FROM fault_effects").await,
                count("SELECT count(*) FROM sk_task_results_t WHERE task_status = 3").await,
            ),
            (effect_jobs, effect_jobs, effect_jobs),
            "every transaction job's write once, every job ended once"
        );
    }
    report(&format!(
        "silent-primary: jobs={effect_jobs} lease_s={} bound_s={} resumed_after_s={resumed:.1} \
         held_at_silence={} longest_held_s={longest:.1} given_up={given_up} stop_s={stop_s:.2} \
         enqueue_errors_s={:?} lost=0 doubled_writes=0",
        LEASE_MS as f64 / 1000.0,
        BOUND_MS as f64 / 1000.0,
        held.len(),
        enqueued
            .iter()
            .map(|(t, _)| (t.as_secs_f64() * 10.0).round() / 10.0)
            .collect::<Vec<_>>()
    ));
    db.drop().await;
}

/// MariaDB, one host, silent for longer than the lease, then back: the worker behind the
/// silence stops being heard from, another takes its jobs once their leases run out, the
/// silenced worker's late writes are refused (each transaction's write stays once), it
/// works again once the host answers, and a SIGTERM in a second silence exits within
/// the grace period and a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_host_silent_past_the_lease_costs_its_jobs_one_lease() {
    let _serial = SERIAL.lock().await;
    const WORK_MS: u64 = 4000;
    const LEASE_MS: u64 = 3000;
    const GRACE_MS: u64 = 2000;
    let (db, _) = setup::<sqlx::MySql>(0, 0).await;
    db.execute("CREATE TABLE fault_effects (task_id BINARY(16) NOT NULL, KEY (task_id))")
        .await;
    let mut ids = EffectMysql::enqueue_many(&db.pool, (0..8).map(|_| EffectMysql::new(WORK_MS)))
        .await
        .unwrap();
    let links = Links::create();
    let proxy = Proxy::start_to(links.host_ip(0), 0, "127.0.0.1:3306").await;
    let url = db.url.replacen(
        "127.0.0.1:3306",
        &format!("{}:{}", links.host_ip(0), proxy.port),
        1,
    );
    assert_ne!(url, db.url, "the test database URL names 127.0.0.1:3306");
    let owned = worker_args(LEASE_MS, 1000, GRACE_MS);
    let args: Vec<&str> = owned.iter().map(String::as_str).collect();
    let mut a = Proc::spawn_in(Some(links.ns()), &url, "silent-mysql-a", &args);
    wait_runs_started(&db, 8, "the silenced worker's 8 runs to start").await;

    let silent_at = Utc::now();
    links.silence(0, true);
    let mut b = Proc::spawn(&db.url, "silent-mysql-b", &args);
    // The other worker runs each job once the silenced one's lease is out.
    wait_until(
        "the other worker to run the 8 jobs",
        Duration::from_secs(60),
        || async {
            let n = db
                .scalar(
                    &format!(
                        "SELECT count(DISTINCT task_id) FROM fault_runs WHERE pid = {}",
                        b.pid()
                    ),
                    None,
                )
                .await?;
            (n == 8).then_some(())
        },
    )
    .await;
    let taken_after: f64 = sqlx::query_scalar(
        "SELECT CAST(MAX(d) AS DOUBLE) / 1e6 FROM (
             SELECT TIMESTAMPDIFF(MICROSECOND, ?, MIN(started_at)) AS d
               FROM fault_runs WHERE pid = ? GROUP BY task_id) AS firsts",
    )
    .bind(silent_at.naive_utc())
    .bind(b.pid())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let limit = LEASE_MS as f64 / 1000.0 + 2.0;
    assert!(
        taken_after <= limit,
        "the silenced worker's jobs were taken over {taken_after:.1} s after the silence (limit {limit:.1} s)"
    );

    // Back: the silenced worker's late writes are refused, and it works again.
    fault_pause(Duration::from_millis(LEASE_MS)).await;
    links.silence(0, false);
    wait_processed(&db, 8, Duration::from_secs(60)).await;
    let more = EffectMysql::enqueue_many(&db.pool, (0..64).map(|_| EffectMysql::new(1000)))
        .await
        .unwrap();
    ids.extend(more);
    wait_processed(&db, ids.len(), Duration::from_secs(60)).await;
    let by_a = db
        .scalar(
            &format!(
                "SELECT count(*) FROM fault_runs WHERE pid = {} AND started_at > ?",
                a.pid()
            ),
            Some(&silent_at.naive_utc().to_string()),
        )
        .await
        .unwrap();
    assert!(
        by_a > 0,
        "the silenced worker ran jobs again once its host answered: {}",
        a.log_text()
    );

    // Silent again, with jobs running: SIGTERM exits within the grace period and a second.
    let a_runs = format!("SELECT count(*) FROM fault_runs WHERE pid = {}", a.pid());
    let ran = db.scalar(&a_runs, None).await.unwrap();
    let last = EffectMysql::enqueue_many(&db.pool, (0..16).map(|_| EffectMysql::new(WORK_MS)))
        .await
        .unwrap();
    ids.extend(last);
    wait_until("the worker's new runs", Duration::from_secs(30), || async {
        let n = db.scalar(&a_runs, None).await?;
        (n > ran).then_some(())
    })
    .await;
    links.silence(0, true);
    let stop_s = stop_within_grace(&mut a, GRACE_MS).await;
    links.silence(0, false);
    wait_processed(&db, ids.len(), Duration::from_secs(60)).await;
    b.signal("TERM");
    assert_eq!(b.exit_code(Duration::from_secs(30)).await, Some(0));
    let n = ids.len() as i64;
    let (effects, distinct) = (
        db.scalar("SELECT count(*) FROM fault_effects", None)
            .await
            .unwrap(),
        db.scalar("SELECT count(DISTINCT task_id) FROM fault_effects", None)
            .await
            .unwrap(),
    );
    assert_eq!(
        (effects, distinct),
        (n, n),
        "each transaction job's write once"
    );
    let reran = assert_each_job_finished_once(&db, &ids).await;
    report(&format!(
        "silent-mysql: jobs={n} lease_s={} taken_over_after_s={taken_after:.1} ran_by_silenced_after={by_a} \
         stop_s={stop_s:.2} reran_jobs={reran} lost=0 doubled_writes=0",
        LEASE_MS as f64 / 1000.0
    ));
    db.drop().await;
}
