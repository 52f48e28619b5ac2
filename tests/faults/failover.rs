//! Failover: a replicated PostgreSQL (pg_auto_failover: a primary and a standby,
//! `sk_tests::cluster`) whose primary host dies (its `pg_autoctl` and its PostgreSQL
//! killed with SIGKILL) in the middle of a burn-down while jobs are being enqueued. The
//! workers, the enqueuer and the test's own pool reach the cluster through one URL that
//! lists both hosts; sk's pool follows the writable one (`sk_runtime::primary_pool`). One
//! of the workers reaches the nodes through a PgBouncer each (transaction pooling), listed
//! the same way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sk_tests::cluster::{Cluster, DEMOTE_WAIT};
use sk_tests::pgbouncer::PgBouncer;

use super::*;

/// What the enqueuer saw: the ids of the enqueues that returned, and how many calls
/// failed (indeterminate: the commit may or may not have happened).
#[derive(Default)]
struct Enqueued {
    committed: Vec<Uuid>,
    failed: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_synchronous_standby_loses_and_doubles_nothing() {
    const JOBS: u32 = 5_000;
    // The cluster's start (10 s, mostly pg_autoctl's waits) runs beside the fault test
    // before this one; the measured part runs alone.
    let mut cluster = Cluster::start(true).await;
    let _serial = SERIAL.lock().await;
    let db = Db::<sqlx::Postgres>::on(&cluster.url()).await;
    db.execute(super::fault_runs::<sqlx::Postgres>()).await;
    db.execute("CREATE TABLE fault_effects (task_id uuid NOT NULL)")
        .await;
    let mut ids = Vec::new();
    for chunk in (0..JOBS).collect::<Vec<_>>().chunks(5_000) {
        ids.extend(
            EffectPg::enqueue_many(&db.pool, chunk.iter().map(|_| EffectPg::new(2)))
                .await
                .unwrap(),
        );
    }

    // Enqueues go on, one job a call, through the whole failover.
    let stop = Arc::new(AtomicBool::new(false));
    let enqueued = Arc::new(Mutex::new(Enqueued::default()));
    let enqueuer = tokio::spawn({
        let (pool, stop, enqueued) = (db.pool.clone(), stop.clone(), enqueued.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                let outcome = EffectPg::new(2).enqueue(&pool).await;
                {
                    let mut e = enqueued.lock().unwrap();
                    match outcome {
                        Ok(id) => e.committed.push(id),
                        Err(_) => e.failed += 1,
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "2000",
        "--poll-ms",
        "100",
        "--job",
        "effect",
    ];
    // One worker straight to the nodes, the other through a PgBouncer per node (in
    // transaction mode: its LISTEN straight to the nodes, `listen_on` with the same list).
    let url = cluster.url();
    let bouncers = [0, 1].map(|i| PgBouncer::start(&format!("127.0.0.1:{}", cluster.port(i)), 20));
    let bounced = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write\
         &sslmode=disable&statement-cache-capacity=0",
        bouncers[0].port, bouncers[1].port
    );
    let mut bounced_args = args.to_vec();
    bounced_args.extend(["--listen-on", &url]);
    let mut workers = [
        Proc::spawn(&url, "failover-a", &args),
        Proc::spawn(&bounced, "failover-b", &bounced_args),
    ];
    wait_processed(&db, 1_500, Duration::from_secs(120)).await;

    let primary = cluster.primary().await.expect("a primary");
    let killed_at = Utc::now();
    let killed = Instant::now();
    cluster.kill(primary);
    // Work resumes when the test, through its own pool, first sees a job completed after
    // the kill.
    let since = killed_at.to_rfc3339();
    wait_until(
        "jobs to complete again after the failover",
        Duration::from_secs(120),
        || async {
            db.scalar(
                "SELECT count(*) FROM sk_task_results_t
                 WHERE task_status = 3 AND task_processing_finalized_at_ts > CAST($1 AS timestamptz)",
                Some(&since),
            )
            .await
            .filter(|n| *n > 0)
        },
    )
    .await;
    let seen = killed.elapsed();
    let promoted = cluster.primary().await;
    assert!(
        promoted.is_some_and(|p| p != primary),
        "the standby took over: {promoted:?}"
    );
    // More enqueues on the new primary, then the enqueuer stops.
    let after = enqueued.lock().unwrap().committed.len();
    wait_until(
        "enqueues on the new primary",
        Duration::from_secs(30),
        || async { (enqueued.lock().unwrap().committed.len() > after + 100).then_some(()) },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    enqueuer.await.unwrap();
    let Enqueued { committed, failed } = std::mem::take(&mut *enqueued.lock().unwrap());
    let during = committed.len();
    ids.extend(committed);

    // Every committed enqueue reaches its one final state.
    let n = ids.len() as i64;
    let id_list = ids
        .iter()
        .map(Uuid::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let done_of_ours = || async {
        db.scalar(
            "SELECT count(*) FROM sk_task_results_t
             WHERE task_status = 3 AND task_id = ANY(string_to_array($1, ',')::uuid[])",
            Some(&id_list),
        )
        .await
    };
    wait_until(
        "every committed job to finish",
        Duration::from_secs(300),
        || async { done_of_ours().await.filter(|d| *d == n) },
    )
    .await;
    let count = |sql: &'static str| async { db.scalar(sql, None).await.expect("a count") };
    let left = count("SELECT count(*) FROM sk_tasks_queue_t").await;
    let results = count("SELECT count(*) FROM sk_task_results_t").await;
    let processed_rows =
        count("SELECT count(*) FROM sk_task_results_t WHERE task_status = 3").await;
    assert_eq!(left, 0, "no job left in the queue");
    assert_eq!(processed_rows, results, "every job that exists succeeded");
    // A failed enqueue call may have committed: at most one job each.
    let extra = results - n;
    assert!(
        (0..=failed as i64).contains(&extra),
        "{extra} jobs beyond the {n} committed, from {failed} failed enqueue calls"
    );
    let ran_after_final = count(
        "SELECT count(*) FROM fault_runs f JOIN sk_task_results_t r USING (task_id)
         WHERE f.started_at > r.task_processing_finalized_at_ts",
    )
    .await;
    assert_eq!(ran_after_final, 0, "no job ran after its final result");
    let (writes, written, twice, orphans) = (
        count("SELECT count(*) FROM fault_effects").await,
        count("SELECT count(DISTINCT task_id) FROM fault_effects").await,
        count("SELECT count(*) FROM (SELECT task_id FROM fault_effects GROUP BY task_id HAVING count(*) > 1) d").await,
        count(
            "SELECT count(*) FROM fault_effects f WHERE NOT EXISTS
               (SELECT 1 FROM sk_task_results_t r WHERE r.task_id = f.task_id AND r.task_status = 3)",
        )
        .await,
    );
    assert_eq!(
        (writes, written, twice, orphans),
        (results, results, 0, 0),
        "each job's transaction write exactly once"
    );
    // The pause itself: the longest gap between two completions around the kill, by
    // the completions' own times (the workers run on this machine's clock).
    let pause_ms = db
        .scalar(
            "SELECT CAST(max(extract(epoch FROM gap)) * 1000 AS BIGINT) FROM (
               SELECT lead(task_processing_finalized_at_ts) OVER (ORDER BY task_processing_finalized_at_ts)
                      - task_processing_finalized_at_ts AS gap
               FROM sk_task_results_t
               WHERE task_processing_finalized_at_ts BETWEEN CAST($1 AS timestamptz) - interval '1 second'
                                                          AND CAST($1 AS timestamptz) + interval '2 minutes') g",
            Some(&since),
        )
        .await
        .expect("completions around the kill");
    let pause = Duration::from_millis(pause_ms as u64);
    let reran = count(
        "SELECT count(*) FROM (SELECT task_id FROM fault_runs GROUP BY task_id HAVING count(*) > 1) d",
    )
    .await;

    // Both went on after the failover, the one behind the PgBouncers too.
    for w in &workers {
        let after = db
            .scalar(
                &format!(
                    "SELECT count(*) FROM fault_runs WHERE pid = {} AND started_at > CAST($1 AS timestamptz)",
                    w.pid()
                ),
                Some(&since),
            )
            .await
            .expect("a count");
        assert!(
            after > 0,
            "{} ran jobs after the failover: {}",
            w.id,
            w.log_text()
        );
    }
    let mut said = std::collections::BTreeSet::new();
    for w in &mut workers {
        assert!(w.alive(), "{} survived the failover", w.id);
        w.signal("TERM");
        assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
        let log = w.log_text();
        assert!(
            log.contains("the writable PostgreSQL host moved"),
            "{} followed the primary: {log}",
            w.id
        );
        for line in log.lines().filter(|l| l.contains("WARN sk_runtime")) {
            // The message without its time, level and fields.
            let message = line.split("sk: ").nth(1).unwrap_or(line);
            let message: String = message
                .split(['(', ':', ';'])
                .next()
                .unwrap_or(message)
                .into();
            said.insert(message.trim().to_owned());
        }
    }
    let events = cluster.events().await;
    let report_line = format!(
        "failover (synchronous standby, pg_auto_failover, demote wait {}s): jobs={results} \
         enqueued_during_run={during} failed_enqueue_calls={failed} lost=0 finalized_twice=0 \
         written_twice=0 reran_jobs={reran} pause_s={:.1} seen_by_the_test_s={:.1}",
        DEMOTE_WAIT.as_secs(),
        pause.as_secs_f64(),
        seen.as_secs_f64()
    );
    report(&report_line);
    eprintln!("the workers' warnings: {said:#?}");
    eprintln!("the monitor's events:\n{}", events.join("\n"));
    assert!(
        pause < Duration::from_secs(60),
        "work resumed {pause:?} after the kill"
    );
    db.drop().await;
}
