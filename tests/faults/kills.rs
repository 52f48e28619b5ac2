//! Kills: worker processes killed with SIGKILL and restarted, on each backend, with
//! plain jobs and with jobs that write through their own transaction.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_restarts_loses_nothing_and_finalizes_once() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 30_000;
    const DUE: u32 = JOBS * 9 / 10;
    const LEASE_MS: u64 = 1000;
    let (db, mut ids) = setup::<sqlx::Postgres>(DUE, 20).await;
    ids.extend(hold_reserve(&db, (DUE..JOBS).map(|_| Burn::new(20))).await);
    let (mut rng, seed) = Rng::from_env();
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "1000",
        "--poll-ms",
        "100",
    ];
    let mut victims = vec![Proc::spawn(&db.url, "kill-victim-0", &args)];
    let mut steady = [
        Proc::spawn(&db.url, "kill-steady-1", &args),
        Proc::spawn(&db.url, "kill-steady-2", &args),
    ];
    let started = Instant::now();
    let mut kills: Vec<(i32, DateTime<Utc>)> = Vec::new();
    let mut expiries: Vec<f64> = Vec::new();
    let mut held_at_kill = 0i64;
    for k in 1..=6 {
        let left = at_kill_point(&db, &mut rng, (k, 6), DUE).await;
        let victim = victims.last_mut().unwrap();
        assert!(victim.alive(), "the victim was running");
        victim.child.kill().unwrap(); // SIGKILL
        victim.child.wait().unwrap();
        kills.push((victim.pid() as i32, Utc::now()));
        // What the kill stranded: jobs leased to the dead process, claimable again when
        // their lease runs out.
        let (held, remaining): (i64, Option<f64>) = sqlx::query_as(
            "SELECT count(*), extract(epoch FROM max(task_locked_until_ts) - clock_timestamp())::float8
             FROM sk_tasks_queue_t WHERE task_locked_by = $1",
        )
        .bind(&victim.id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        held_at_kill += held;
        expiries.extend(remaining);
        report(&format!(
            "kill-9: kill {k} of pid {} with {left} jobs left",
            victim.pid()
        ));
        victims.push(Proc::spawn(&db.url, &format!("kill-victim-{k}"), &args));
    }
    release_reserve(&db).await;
    wait_processed(&db, JOBS as usize, Duration::from_secs(300)).await;
    let elapsed = started.elapsed();
    for p in victims.iter_mut().rev().take(1).chain(steady.iter_mut()) {
        p.signal("TERM");
        assert_eq!(
            p.exit_code(Duration::from_secs(30)).await,
            Some(0),
            "{} exits 0 on SIGTERM",
            p.id
        );
    }
    let reran = assert_each_job_finished_once(&db, &ids).await;

    // Runs cut short by a kill ran again, once their lease had run out.
    let killed_pids: Vec<i32> = kills.iter().map(|k| k.0).collect();
    let reruns: Vec<(i32, DateTime<Utc>)> = sqlx::query_as(
        "SELECT first.pid, next.started_at FROM fault_runs first
         JOIN LATERAL (SELECT started_at FROM fault_runs n WHERE n.task_id = first.task_id AND n.attempt > first.attempt
                       ORDER BY n.attempt LIMIT 1) next ON true
         WHERE first.pid = ANY($1)",
    )
    .bind(&killed_pids)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut recovery: Vec<f64> = reruns
        .iter()
        .map(|(pid, at)| {
            let killed_at = kills.iter().find(|k| k.0 == *pid).unwrap().1;
            (*at - killed_at).as_seconds_f64()
        })
        .collect();
    recovery.sort_by(f64::total_cmp);
    expiries.sort_by(f64::total_cmp);
    assert!(
        !recovery.is_empty(),
        "some runs were cut short by the kills"
    );
    let lease = LEASE_MS as f64 / 1000.0;
    // Stranded leases ran out within one lease of the kill (heartbeats extend by one lease).
    assert!(
        expiries.iter().all(|e| *e <= lease + 0.05),
        "a lease outlived the kill by more than the lease: {expiries:?}"
    );
    // The last heartbeat before a kill extended the lease from at most a third of a lease
    // earlier, so a rerun cannot start sooner than 2/3 of a lease after the kill.
    assert!(
        recovery[0] >= lease * 2.0 / 3.0 - 0.05,
        "a rerun started before the lease ran out: {recovery:?}"
    );
    // The job record: a job that ran again shows the attempt it lost (the killed worker's),
    // and its first attempt is the first run's claim, not the rerun's.
    let (reran_without_lost, first_too_late, lost_on_record): (i64, i64, i64) = sqlx::query_as(
        "WITH runs AS (SELECT task_id, count(*) AS n, min(started_at) AS first FROM fault_runs GROUP BY task_id)
         SELECT count(*) FILTER (WHERE runs.n > 1 AND NOT r.task_errors @> '[{\"outcome\": \"lost\"}]'),
                count(*) FILTER (WHERE r.task_first_processing_attempted_at_ts > runs.first),
                count(*) FILTER (WHERE r.task_errors @> '[{\"outcome\": \"lost\"}]')
         FROM runs JOIN sk_task_results_t r USING (task_id)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (reran_without_lost, first_too_late),
        (0, 0),
        "lost attempts and first-attempt times on record"
    );
    report(&format!(
        "kill-9: seed={seed} jobs={JOBS} workers=3 kills={k} restarts={k} lost=0 finalized_twice=0 reran_jobs={reran} \
         leased_to_killed={held_at_kill} lease_s={lease:.1} lease_left_at_kill_s(max)={:.2} \
         rerun_after_kill_s(min/p50/max)={:.2}/{:.2}/{:.2} (lease expiry, then FIFO behind older waiting jobs) burn_down_s={:.1} \
         jobs_with_a_lost_attempt_on_record={lost_on_record}",
        expiries.last().copied().unwrap_or(f64::NAN),
        recovery[0],
        percentile(&recovery, 0.5),
        recovery.last().unwrap(),
        elapsed.as_secs_f64(),
        k = kills.len(),
    ));
    db.drop().await;
}

on_backends! {
    /// As on PostgreSQL, three worker processes, one killed with SIGKILL and restarted four
    /// times. SQLite has no `SKIP LOCKED`: its write lock, taken by each claim before it
    /// reads, keeps the processes' claims apart (docs/backends.md), and a process killed
    /// inside a write leaves no half-written transaction behind. On MySQL/MariaDB claims
    /// meet at `FOR UPDATE SKIP LOCKED`, and a killed process's open transaction is rolled
    /// back by the server when its connection drops.
    fn kill_9_with_restarts_on => kill_9_on [sqlite, mysql]
}

async fn kill_9_on<B: TestBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 6_000;
    const DUE: u32 = JOBS * 9 / 10;
    let (db, mut ids) = setup::<B>(DUE, 20).await;
    ids.extend(hold_reserve(&db, (DUE..JOBS).map(|_| Burn::new(20))).await);
    let (mut rng, seed) = Rng::from_env();
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "1000",
        "--poll-ms",
        "100",
    ];
    let mut victims = vec![Proc::spawn(&db.url, &format!("{label}-victim-0"), &args)];
    let mut steady = [
        Proc::spawn(&db.url, &format!("{label}-steady-1"), &args),
        Proc::spawn(&db.url, &format!("{label}-steady-2"), &args),
    ];
    let started = Instant::now();
    let mut held_at_kill = 0;
    let kills = 4;
    for k in 1..=kills {
        let left = at_kill_point(&db, &mut rng, (k, kills), DUE).await;
        let victim = victims.last_mut().unwrap();
        assert!(victim.alive(), "the victim was running");
        victim.child.kill().unwrap(); // SIGKILL
        victim.child.wait().unwrap();
        held_at_kill += db
            .scalar(
                "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = $1",
                Some(&victim.id),
            )
            .await
            .expect("a count");
        report(&format!(
            "{label} kill-9: kill {k} of pid {} with {left} jobs left",
            victim.pid()
        ));
        victims.push(Proc::spawn(&db.url, &format!("{label}-victim-{k}"), &args));
    }
    release_reserve(&db).await;
    wait_processed(&db, JOBS as usize, Duration::from_secs(300)).await;
    let elapsed = started.elapsed();
    for p in victims.iter_mut().rev().take(1).chain(steady.iter_mut()) {
        p.signal("TERM");
        assert_eq!(
            p.exit_code(Duration::from_secs(30)).await,
            Some(0),
            "{} exits 0 on SIGTERM",
            p.id
        );
    }
    let reran = assert_each_job_finished_once(&db, &ids).await;
    let lost = if B::BACKEND == "MySQL" {
        "JSON_SEARCH(r.task_errors, 'one', 'lost', NULL, '$[*].outcome') IS NOT NULL"
    } else {
        "EXISTS (SELECT 1 FROM json_each(r.task_errors) e WHERE e.value ->> 'outcome' = 'lost')"
    };
    let reran_without_lost = db
        .scalar(
            &format!(
                "SELECT count(*) FROM (SELECT task_id FROM fault_runs GROUP BY task_id HAVING count(*) > 1) d
                 JOIN sk_task_results_t r USING (task_id) WHERE NOT {lost}"
            ),
            None,
        )
        .await;
    assert_eq!(
        reran_without_lost,
        Some(0),
        "a job that ran again has its lost attempt on record"
    );
    assert!(held_at_kill > 0, "the kills stranded leased jobs");
    assert!(reran > 0, "jobs cut short by a kill ran again");
    report(&format!(
        "{label} kill-9: seed={seed} jobs={JOBS} processes=3 kills={kills} restarts={kills} lost=0 finalized_twice=0 \
         reran_jobs={reran} leased_to_killed={held_at_kill} burn_down_s={:.1}",
        elapsed.as_secs_f64()
    ));
    db.drop().await;
}

on_backends! {
    /// Jobs that write through their own transaction (`effect_pg`, `effect_mysql`): three
    /// worker processes, one killed with SIGKILL at random points and restarted four times,
    /// over 10,000 jobs. A kill between the write and the completion leaves neither, so
    /// every job's write is there exactly once, though the jobs cut short ran again.
    fn kill_9_leaves_each_transaction_jobs_write_exactly_once => kill_9_effects_on [postgres, mysql]
}

/// A backend whose worker binary has a transaction job: the job that writes through it.
trait Effects: TestBackend {
    type Job: sk_runtime::Job;
    fn job(millis: u64) -> Self::Job;
}

impl Effects for sqlx::Postgres {
    type Job = EffectPg;
    fn job(millis: u64) -> EffectPg {
        EffectPg::new(millis)
    }
}

impl Effects for sqlx::MySql {
    type Job = EffectMysql;
    fn job(millis: u64) -> EffectMysql {
        EffectMysql::new(millis)
    }
}

async fn kill_9_effects_on<B: Effects>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let job = B::job;
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 10_000;
    const DUE: u32 = JOBS * 9 / 10;
    let (db, _) = setup::<B>(0, 0).await;
    db.execute(if B::BACKEND == "MySQL" {
        "CREATE TABLE fault_effects (task_id BINARY(16) NOT NULL, KEY (task_id))"
    } else {
        "CREATE TABLE fault_effects (task_id uuid NOT NULL)"
    })
    .await;
    let mut ids = sk_runtime::Enqueue::enqueue_many(&db.pool, (0..DUE).map(|_| job(20)))
        .await
        .unwrap();
    ids.extend(hold_reserve(&db, (DUE..JOBS).map(|_| job(20))).await);
    let (mut rng, seed) = Rng::from_env();
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "1000",
        "--poll-ms",
        "100",
        "--job",
        "effect",
    ];
    let name = |role: &str| format!("{label}-effects-{role}");
    let mut victims = vec![Proc::spawn(&db.url, &name("victim-0"), &args)];
    let mut steady = [
        Proc::spawn(&db.url, &name("steady-1"), &args),
        Proc::spawn(&db.url, &name("steady-2"), &args),
    ];
    let started = Instant::now();
    let kills = 4;
    let mut in_flight = 0;
    for k in 1..=kills {
        at_kill_point(&db, &mut rng, (k, kills), DUE).await;
        let victim = victims.last_mut().unwrap();
        assert!(victim.alive(), "the victim was running");
        victim.child.kill().unwrap(); // SIGKILL
        victim.child.wait().unwrap();
        in_flight += db
            .scalar(
                "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = $1",
                Some(&victim.id),
            )
            .await
            .expect("a count");
        victims.push(Proc::spawn(&db.url, &name(&format!("victim-{k}")), &args));
    }
    release_reserve(&db).await;
    wait_processed(&db, JOBS as usize, Duration::from_secs(300)).await;
    let elapsed = started.elapsed();
    for p in victims.iter_mut().rev().take(1).chain(steady.iter_mut()) {
        p.signal("TERM");
        assert_eq!(
            p.exit_code(Duration::from_secs(30)).await,
            Some(0),
            "{} exits 0 on SIGTERM",
            p.id
        );
    }
    let reran = assert_each_job_finished_once(&db, &ids).await;
    let db_ref = &db;
    let count = |sql: &'static str| async move { db_ref.scalar(sql, None).await.expect("a count") };
    let (writes, jobs_written, twice) = (
        count("SELECT count(*) FROM fault_effects").await,
        count("SELECT count(DISTINCT task_id) FROM fault_effects").await,
        count("SELECT count(*) FROM (SELECT task_id FROM fault_effects GROUP BY task_id HAVING count(*) > 1) d").await,
    );
    assert_eq!(
        (writes, jobs_written, twice),
        (i64::from(JOBS), i64::from(JOBS), 0),
        "each job's write exactly once"
    );
    let orphan = count(
        "SELECT count(*) FROM fault_effects f WHERE NOT EXISTS
           (SELECT 1 FROM sk_task_results_t r WHERE r.task_id = f.task_id AND r.task_status = 3)",
    )
    .await;
    assert_eq!(orphan, 0, "no write without its job's completion");
    assert!(in_flight > 0, "the kills cut jobs short");
    assert!(reran > 0, "jobs cut short by a kill ran again");
    report(&format!(
        "{label} kill-9 transaction jobs: seed={seed} jobs={JOBS} processes=3 kills={kills} \
         writes={writes} written_twice=0 reran_jobs={reran} leased_to_killed={in_flight} burn_down_s={:.1}",
        elapsed.as_secs_f64()
    ));
    db.drop().await;
}

on_backends! {
    /// Jobs of five resumable steps (`stepped`: the third 150 ms, the others 2 ms): three
    /// worker processes, one killed with SIGKILL at random points (mostly in a third
    /// step, the long one) and restarted three times. A step that recorded its output
    /// never runs again; a job whose first run was killed in its third step ran its first
    /// two steps once.
    fn kill_9_in_a_step_never_repeats_a_recorded_one => kill_9_steps_on [postgres, sqlite, mysql]
}

async fn kill_9_steps_on<B: TestBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 1_500;
    const DUE: u32 = JOBS * 9 / 10;
    let (db, _) = setup::<B>(0, 0).await;
    db.execute(if B::BACKEND == "MySQL" {
        "CREATE TABLE fault_steps (task_id BINARY(16) NOT NULL, step INT NOT NULL, attempt INT NOT NULL)"
    } else if B::BACKEND == "SQLite" {
        "CREATE TABLE fault_steps (task_id BLOB NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL)"
    } else {
        "CREATE TABLE fault_steps (task_id uuid NOT NULL, step int NOT NULL, attempt int NOT NULL)"
    })
    .await;
    let mut ids = Stepped::enqueue_many(&db.pool, (0..DUE).map(|_| Stepped::new(150)))
        .await
        .unwrap();
    ids.extend(hold_reserve(&db, (DUE..JOBS).map(|_| Stepped::new(150))).await);
    let (mut rng, seed) = Rng::from_env();
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "1000",
        "--poll-ms",
        "100",
        "--job",
        "stepped",
    ];
    let kills = 3;
    let elapsed = burn_down_with_kills(
        &db,
        &format!("{label}-steps"),
        &args,
        &mut rng,
        kills,
        DUE,
        JOBS as usize,
    )
    .await;
    let reran = assert_each_job_finished_once(&db, &ids).await;

    // Every run of a step, by job: (step, attempt).
    let runs_sql = match B::BACKEND {
        "MySQL" => "SELECT CONCAT(HEX(task_id), ' ', step, ' ', attempt) FROM fault_steps",
        "SQLite" => "SELECT hex(task_id) || ' ' || step || ' ' || attempt FROM fault_steps",
        _ => "SELECT task_id::text || ' ' || step || ' ' || attempt FROM fault_steps",
    };
    let mut runs: std::collections::HashMap<Uuid, Vec<(u32, i32)>> = Default::default();
    for line in db.texts(runs_sql).await {
        let mut parts = line.split(' ');
        let (id, step, attempt) = (parts.next(), parts.next(), parts.next());
        let id = Uuid::parse_str(id.unwrap()).unwrap();
        let run = (
            step.unwrap().parse().unwrap(),
            attempt.unwrap().parse().unwrap(),
        );
        runs.entry(id).or_default().push(run);
    }
    let client = sk_runtime::Client::new(db.pool.clone());
    let (mut killed_in_step_3, mut repeated_steps) = (0, 0);
    for id in &ids {
        let steps = client.job(*id).await.unwrap().unwrap().steps().unwrap();
        let runs = &runs[id];
        // The attempt that recorded each step's output.
        let recorded: Vec<i32> = (1..=5)
            .map(|k| {
                let output = &steps[&format!("step {k}")];
                assert_eq!(output[0], k, "step {k}'s output names it");
                i32::try_from(output[1].as_i64().unwrap()).unwrap()
            })
            .collect();
        for (k, &at) in (1..=5u32).zip(&recorded) {
            let of_step: Vec<i32> = runs.iter().filter(|r| r.0 == k).map(|r| r.1).collect();
            assert_eq!(
                of_step.iter().filter(|&&a| a >= at).count(),
                1,
                "job {id}: step {k} recorded at attempt {at} ran again after it: {runs:?}"
            );
            repeated_steps += of_step.len() - 1;
        }
        if recorded[2] > 1 && runs.contains(&(3, 1)) {
            killed_in_step_3 += 1;
            let mut first_two: Vec<&(u32, i32)> = runs.iter().filter(|r| r.0 < 3).collect();
            first_two.sort_unstable();
            assert_eq!(
                first_two,
                [&(1, 1), &(2, 1)],
                "job {id}: its first run was cut in step 3, so steps 1 and 2 ran once"
            );
        }
    }
    assert!(reran > 0, "jobs cut short by a kill ran again");
    assert!(killed_in_step_3 > 0, "a kill landed in a third step");
    report(&format!(
        "{label} kill-9 steps: seed={seed} jobs={JOBS} processes=3 kills={kills} reran_jobs={reran} \
         killed_in_step_3={killed_in_step_3} step_runs_repeated_before_their_record={repeated_steps} \
         recorded_steps_run_again=0 burn_down_s={:.1}",
        elapsed.as_secs_f64()
    ));
    db.drop().await;
}

/// Three worker processes with `args` (named after `label`): the first killed with
/// SIGKILL at `kills` kill points of the `due` jobs' burn-down and restarted after each;
/// then the reserve released and `total` jobs awaited, and every process stopped with
/// SIGTERM (each must exit 0). The burn-down's time.
async fn burn_down_with_kills<B: TestBackend>(
    db: &Db<B>,
    label: &str,
    args: &[&str],
    rng: &mut Rng,
    kills: u32,
    due: u32,
    total: usize,
) -> Duration
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let name = |role: &str| format!("{label}-{role}");
    let mut victims = vec![Proc::spawn(&db.url, &name("victim-0"), args)];
    let mut steady = [
        Proc::spawn(&db.url, &name("steady-1"), args),
        Proc::spawn(&db.url, &name("steady-2"), args),
    ];
    let started = Instant::now();
    for k in 1..=kills {
        at_kill_point(db, rng, (k, kills), due).await;
        let victim = victims.last_mut().unwrap();
        assert!(victim.alive(), "the victim was running");
        victim.child.kill().unwrap(); // SIGKILL
        victim.child.wait().unwrap();
        victims.push(Proc::spawn(&db.url, &name(&format!("victim-{k}")), args));
    }
    release_reserve(db).await;
    wait_processed(db, total, Duration::from_secs(300)).await;
    let elapsed = started.elapsed();
    for p in victims.iter_mut().rev().take(1).chain(steady.iter_mut()) {
        p.signal("TERM");
        assert_eq!(
            p.exit_code(Duration::from_secs(30)).await,
            Some(0),
            "{} exits 0 on SIGTERM",
            p.id
        );
    }
    elapsed
}

on_backends! {
    /// Batches of `burn` jobs, each with a complete callback (a `burn` job too), under
    /// three worker processes, one killed with SIGKILL at random points and restarted
    /// three times. Each batch counts each of its jobs once though jobs cut short ran
    /// again, and each callback is posted and finished exactly once.
    fn kill_9_posts_each_batch_callback_once => kill_9_batches_on [postgres, sqlite, mysql]
}

async fn kill_9_batches_on<B: TestBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    const BATCHES: u32 = 30;
    const EACH: u32 = 40;
    // Per batch, 36 jobs due and 4 held in the reserve until the last kill.
    const HELD: u32 = 4;
    const DUE: u32 = BATCHES * (EACH - HELD);
    let (db, _) = setup::<B>(0, 0).await;
    let client = sk_runtime::Client::new(db.pool.clone());
    assert!(client.pause(RESERVE).await.unwrap(), "a new queue");
    let mut ids = Vec::new();
    let mut batches = Vec::new();
    for _ in 0..BATCHES {
        let jobs = (0..EACH).map(|n| {
            let job = sk_runtime::Enqueue::new(Burn::new(20));
            if n < HELD {
                job.with_queue(RESERVE)
            } else {
                job
            }
        });
        let batch = sk_runtime::Batch::new()
            .add_all(jobs)
            .on_complete(Burn::new(1))
            .enqueue(&db.pool)
            .await
            .unwrap();
        ids.extend_from_slice(&batch.jobs);
        ids.extend(batch.callbacks.iter().map(|c| c.1));
        batches.push(batch.batch);
    }
    let (mut rng, seed) = Rng::from_env();
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "1000",
        "--poll-ms",
        "100",
    ];
    let kills = 3;
    let total = ids.len();
    let elapsed = burn_down_with_kills(
        &db,
        &format!("{label}-batches"),
        &args,
        &mut rng,
        kills,
        DUE,
        total,
    )
    .await;
    // Every job and every callback finished once; no callback more than once.
    let reran = assert_each_job_finished_once(&db, &ids).await;
    for batch in &batches {
        let record = client.batch(*batch).await.unwrap().unwrap();
        assert_eq!(
            (
                record.total,
                record.succeeded,
                record.pending,
                record.failed
            ),
            (i64::from(EACH), i64::from(EACH), 0, 0),
            "batch {batch} counted each job once"
        );
        assert!(
            record.callbacks[0].posted_at.is_some(),
            "batch {batch}: its callback was posted"
        );
    }
    assert!(reran > 0, "jobs cut short by a kill ran again");
    report(&format!(
        "{label} kill-9 batches: seed={seed} batches={BATCHES} jobs={} processes=3 kills={kills} \
         reran_jobs={reran} callbacks_posted_once={BATCHES} burn_down_s={:.1}",
        BATCHES * EACH,
        elapsed.as_secs_f64()
    ));
    db.drop().await;
}
