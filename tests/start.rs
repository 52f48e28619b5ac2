//! Starting a worker and enqueueing: duplicate task types and missing data, bad input, older and newer schemas, unique keys.
//! A module of the `queue` test binary.

use super::*;

#[tokio::test]
async fn worker_start_names_duplicate_task_types_and_missing_data() {
    let pool = sqlx::PgPool::connect_lazy(&sk_tests::database_url()).unwrap();
    let error = Worker::builder(pool.clone())
        .build()
        .err()
        .expect("two jobs share a name");
    let Error::DuplicateTaskType {
        task_type,
        first,
        second,
    } = &error
    else {
        panic!("{error}")
    };
    assert_eq!(task_type, "same_name");
    assert!(
        first.starts_with("tests/queue.rs:")
            && second.starts_with("tests/queue.rs:")
            && first != second,
        "{error}"
    );
    assert!(error
        .to_string()
        .contains("give one of them `name = \"...\"`"));

    let error = Worker::builder(pool.clone())
        .task_types([WantsData::TASK_TYPE])
        .build()
        .err()
        .expect("no data");
    assert_eq!(
        error.to_string(),
        "job `wants_data` takes `Data<alloc::string::String>`, but the worker has no such data; add it with `Worker::builder(..).data(..)`"
    );
    for (builder, what) in [
        (
            Worker::builder(pool.clone()).queues(Vec::<String>::new()),
            "queues",
        ),
        (
            Worker::builder(pool.clone()).task_types(Vec::<String>::new()),
            "task types",
        ),
    ] {
        let error = builder.build().err().expect("an empty list");
        assert_eq!(
            error.to_string(),
            format!("invalid {what}: the list is empty, so the worker would claim nothing; leave it unset to take every one")
        );
    }
    let error = Worker::builder(pool)
        .task_types(["not_linked"])
        .build()
        .err()
        .expect("unknown type");
    assert!(
        error
            .to_string()
            .contains("`not_linked` was asked for but no #[job] with that name is linked"),
        "{error}"
    );
}

#[tokio::test]
async fn bad_enqueue_input_is_refused_with_a_clear_error() {
    let pool = sqlx::PgPool::connect_lazy(&sk_tests::database_url()).unwrap();
    let error = Record::new("x".into())
        .with_queue("")
        .enqueue(&pool)
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "invalid queue name: must not be empty");
    // PostgreSQL's jsonb refused it with its own error; SQLite and MySQL took it.
    for metadata in [
        serde_json::json!({"note": "a\u{0}b"}),
        serde_json::json!({"deep": [{"a\u{0}": 1}]}),
    ] {
        let error = Record::new("x".into())
            .with_metadata(metadata)
            .enqueue(&pool)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::Invalid {
                    what: "metadata",
                    ..
                }
            ) && error.to_string().contains("NUL character"),
            "{error}"
        );
    }
    let error = Record::new("x".into())
        .with_queue("q".repeat(256))
        .enqueue(&pool)
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid queue name: is 256 bytes long, over the limit of 255"
    );
    let error = sk_runtime::Enqueue::new(Record::new("x".repeat(100)))
        .with_max_payload(64)
        .enqueue(&pool)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("job `record` has a payload of 112 bytes, over the limit of 64 bytes"),
        "{error}"
    );
}

each_backend! {
    async fn priorities_at_the_integer_limits(db) {
        let jobs = [
            ("max", i32::MAX),
            ("min", i32::MIN),
            ("zero", 0),
            ("minus one", -1),
        ];
        let order = run_one_at_a_time(&db, &jobs).await;
        assert_eq!(order, ["min", "minus one", "zero", "max"]);
        db.drop().await;
    }
}

each_backend! {
    async fn names_full_of_quotes_and_sql_are_stored_as_data(db) {
        let (probe, mut rx) = probe();
        let queue = "q'; DROP TABLE sk_tasks_queue_t; --";
        let source = "Robert'); DROP TABLE students;-- \\ \"x\" $1 $$";
        let id = sk_runtime::Enqueue::new(EvilName::new("it's \"quoted\"".into()))
            .with_queue(queue)
            .with_source(source)
            .enqueue(&db.pool)
            .await
            .unwrap();
        let w = RunningWorker::start(
            worker(&db, &[EvilName::TASK_TYPE])
                .queues([queue])
                .data(probe),
        );
        let ran = recv(&mut rx, "the job", T).await;
        assert_eq!((ran.id, ran.label.as_str()), (id, "it's \"quoted\""));
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        w.stop().await;
        assert_eq!(
            (r.task_type.as_str(), r.queue.as_str(), r.source.as_str()),
            (EvilName::TASK_TYPE, queue, source)
        );
        assert_eq!(
            db.info()
                .counts()
                .await
                .unwrap()
                .status(JobStatus::Processed),
            1,
            "both tables intact"
        );
        db.drop().await;
    }
}

each_backend! {
    async fn run_time_schedules_parse_or_fail_with_a_clear_error(db) {
        let error = worker(&db, &[Record::TASK_TYPE])
            .data(probe_only())
            .periodic("61 * * * *", Record::new("never".into()))
            .build()
            .err()
            .expect("a bad expression");
        let text = error.to_string();
        assert!(text.starts_with("invalid cron schedule: periodic job `record`: \"61 * * * *\" does not parse: Minutes must be"), "{text}");
        assert!(text.ends_with("('61' specified.)"), "{text}");
        let error = worker(&db, &[Record::TASK_TYPE])
            .data(probe_only())
            .periodic("daily", Record::new("x".into()))
            .build()
            .err()
            .unwrap();
        assert!(
            error
                .to_string()
                .contains("\"daily\" has 1 fields; expected 5, 6 or 7"),
            "{error}"
        );

        // A good one runs with its payload, once per tick.
        let (probe, mut rx) = probe();
        let clock = ManualClock::new(
            Utc::now().with_nanosecond(500_000_000).unwrap() + chrono::Duration::seconds(1),
        );
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .clock(clock.clone())
                .periodic("* * * * * *", Record::new("from the schedule".into()))
                .data(probe),
        );
        db.wait_worker_up(&w.id).await;
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            recv(&mut rx, "the periodic job", T).await.label,
            "from the schedule"
        );
        w.stop().await;
        db.drop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_an_older_version_is_brought_forward() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let old = sk_runtime::Schema::new("old", "sk_").unwrap();
    sk_runtime::__private::migrate_to(&db.pool, &old, 1)
        .await
        .unwrap();
    // A job as sk v1 wrote it: payload in both tables, NOT NULL in results.
    let id = Uuid::now_v7();
    sqlx::query(
        "WITH r AS (
            INSERT INTO old.sk_task_results_t (task_id, task_type, task_source, task_payload, task_queue,
                task_status, task_priority, task_posted_at_ts)
            VALUES ($1, 'record', 'v1', '{\"label\": \"queued under v1\"}', 'default', 1, 0, now()))
         INSERT INTO old.sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_priority,
             task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts)
         VALUES ($1, 'record', 'v1', '{\"label\": \"queued under v1\"}', 0, now(), now(), 'default', 25)",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .schema(old.clone())
            .data(probe),
    );
    assert_eq!(recv(&mut rx, "the v1 job", T).await.id, id);
    w.stop().await;
    let versions: Vec<i32> =
        sqlx::query_scalar("SELECT version FROM old.sk_schema_migrations_t ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(versions, (1..=27).collect::<Vec<i32>>());
    // The old results table became the default partition (migration 5), options and all.
    let options: Vec<String> = sqlx::query_scalar(
        "SELECT unnest(reloptions) FROM pg_class WHERE oid = 'old.sk_task_results_default'::regclass ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        options,
        [
            "autovacuum_analyze_scale_factor=0.05",
            "autovacuum_vacuum_scale_factor=0.05"
        ]
    );

    // A schema newer than this build is refused, not touched.
    sqlx::query("INSERT INTO old.sk_schema_migrations_t (version, description) VALUES (99, 'from the future')")
        .execute(&db.pool)
        .await
        .unwrap();
    let worker = worker(&db, &[Record::TASK_TYPE])
        .schema(old)
        .data(probe_only())
        .build()
        .unwrap();
    let error = worker.run_until(std::future::pending()).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the database schema is at version 99, newer than this sk (27); upgrade sk"
    );
    db.drop().await;
}

fn probe_only() -> Probe {
    probe().0
}

each_backend! {
    async fn enqueue_many_keeps_per_job_options_and_skips_known_unique_keys(db) {
        let (probe, mut rx) = probe();
        let mixed = vec![
            sk_runtime::Enqueue::new(Record::new("b".into())).with_priority(2),
            sk_runtime::Enqueue::new(Record::new("a".into()))
                .with_priority(1)
                .with_queue("other"),
            sk_runtime::Enqueue::new(Record::new("c".into())).with_priority(2),
        ];
        let ids = Record::enqueue_many(&db.pool, mixed).await.unwrap();
        let keyed = vec![
            sk_runtime::Enqueue::new(Record::new("d".into()))
                .with_priority(3)
                .with_unique_key("k1"),
            sk_runtime::Enqueue::new(Record::new("e".into()))
                .with_priority(3)
                .with_unique_key("k2"),
        ];
        Record::enqueue_many(&db.pool, keyed).await.unwrap();
        let again = vec![sk_runtime::Enqueue::new(Record::new("d again".into())).with_unique_key("k1")];
        Record::enqueue_many(&db.pool, again).await.unwrap();
        let record = db.job(ids[1]).await;
        assert_eq!((record.queue.as_str(), record.priority), ("other", 1));

        let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).concurrency(1).data(probe));
        let mut order = Vec::new();
        for _ in 0..5 {
            order.push(recv(&mut rx, "a job", T).await.label);
        }
        w.stop().await;
        assert_eq!(
            order,
            ["a", "b", "c", "d", "e"],
            "priority, then the caller's order"
        );
        assert!(rx.try_recv().is_err(), "the duplicate key was skipped");
        db.drop().await;
    }
}

each_backend! {
    /// A large batch keeps every job's fields, text with tabs, newlines and backslashes
    /// included, keeps the caller's order, and is stored with the caller's transaction
    /// or not at all; so does a batch of jobs alike but for their payloads (which a store
    /// may send apart).
    async fn a_large_batch_keeps_its_fields_order_and_transaction(db) {
        const JOBS: usize = 1500;
        const ODD: &str = "tab\there, line\nbreak, back\\slash \\N, cr\r and ünïcödé";
        let batch = |salt: &'static str| {
            (0..JOBS).map(move |i| {
                let job = sk_runtime::Enqueue::new(Record::new(format!("{i} {ODD} {salt}")));
                if i % 2 == 1 {
                    return job;
                }
                job.with_tenant(format!("tenant {ODD}"))
                    .with_correlation_id(format!("corr\t{i}"))
                    .with_metadata(serde_json::json!({ "k": ODD, "i": i }))
                    .with_queue("other")
            })
        };
        let counts = || async {
            (
                db.scalar("SELECT count(*) FROM sk_tasks_queue_t", None).await,
                db.scalar("SELECT count(*) FROM sk_task_results_t", None).await,
            )
        };
        let mut tx = db.pool.begin().await.unwrap();
        Record::enqueue_many(&mut *tx, batch("rolled back")).await.unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(counts().await, (Some(0), Some(0)), "rolled back with the caller's transaction");

        let mut tx = db.pool.begin().await.unwrap();
        let ids = Record::enqueue_many(&mut *tx, batch("kept")).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(ids.len(), JOBS);
        let n = Some(JOBS as i64);
        // A job without a unique key has no results row until its first outcome (one
        // row per job at enqueue).
        assert_eq!(counts().await, (n, Some(0)), "a queue row each");
        let by_status = db.info().counts().await.unwrap().by_status;
        assert_eq!(by_status, [(JobStatus::Unprocessed, JOBS as i64)], "every job counted once");
        let client = sk_runtime::Client::new(db.pool.clone());
        let (mut listed, mut after) = (Vec::new(), None);
        loop {
            let page = client.jobs(&sk_runtime::JobFilter::new(), after, 1000).await.unwrap();
            listed.extend(page.jobs.iter().map(|j| (j.id, j.status())));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let mut expected: Vec<_> = ids.iter().map(|id| (*id, JobStatus::Unprocessed)).collect();
        expected.sort_unstable_by_key(|j| std::cmp::Reverse(j.0));
        assert_eq!(listed, expected, "every job listed once, newest first");
        let even = db.job(ids[0]).await;
        let expected = format!("tenant {ODD}");
        assert_eq!(
            (even.queue.as_str(), even.tenant.as_deref(), even.correlation_id.as_deref()),
            ("other", Some(expected.as_str()), Some("corr\t0"))
        );
        let metadata: serde_json::Value =
            serde_json::from_str(even.metadata.as_deref().unwrap()).unwrap();
        assert_eq!(metadata, serde_json::json!({ "k": ODD, "i": 0 }));
        let odd = db.job(ids[1]).await;
        assert_eq!(
            (odd.queue.as_str(), odd.tenant, odd.correlation_id, odd.metadata),
            ("default", None, None, None)
        );
        let alike = Record::enqueue_many(
            &db.pool,
            (0..JOBS).map(|i| {
                sk_runtime::Enqueue::new(Record::new(format!("{i} {ODD} alike")))
                    .with_tenant(format!("tenant {ODD}"))
                    .with_metadata(serde_json::json!({ "k": ODD }))
                    .with_priority(1)
            }),
        )
        .await
        .unwrap();
        let last = db.job(alike[JOBS - 1]).await;
        assert_eq!(
            (last.priority, last.tenant.as_deref(), last.metadata.as_deref().map(|m| {
                serde_json::from_str::<serde_json::Value>(m).unwrap()
            })),
            (1, Some(expected.as_str()), Some(serde_json::json!({ "k": ODD })))
        );

        // One job a claim: they start in the queue's own order, the caller's.
        let (probe, mut rx) = probe();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE]).concurrency(1).prefetch(0).data(probe),
        );
        for (i, id) in ids.iter().enumerate() {
            let seen = recv(&mut rx, "a job of the batch", T).await;
            assert_eq!((seen.id, seen.label), (*id, format!("{i} {ODD} kept")));
        }
        for (i, id) in alike.iter().enumerate() {
            let seen = recv(&mut rx, "a job of the batch alike", T).await;
            assert_eq!((seen.id, seen.label), (*id, format!("{i} {ODD} alike")));
        }
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn finished_results_are_pruned_after_the_retention_period(db) {
        let (probe, mut rx) = probe();
        let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
        let done = Record::new("done".into()).enqueue(&db.pool).await.unwrap();
        let waiting = Record::new("later".into())
            .run_at(clock.now() + chrono::Duration::days(30))
            .enqueue(&db.pool)
            .await
            .unwrap();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .clock(clock.clone())
                .result_retention(Duration::from_secs(7 * 24 * 3600))
                .maintenance_interval(Duration::from_millis(100))
                .data(probe),
        );
        assert_eq!(recv(&mut rx, "the job", T).await.id, done);
        db.wait_job(done, T, |r| r.status() == JobStatus::Processed)
            .await;
        clock.advance(Duration::from_secs(6 * 24 * 3600));
        // A maintenance pass prunes, then stamps the metrics with the clock: once the stamp
        // shows the advanced time, a prune at that time has run, and the result is still kept.
        let six_days_on = clock.now();
        wait_until("a maintenance pass at the advanced clock", T, || async {
            let stamp = db
                .time(
                    "SELECT max(metric_last_updated) FROM sk_metrics_t WHERE metric_owner_process_id = $1",
                    Some(&w.id),
                )
                .await;
            (stamp >= Some(six_days_on)).then_some(())
        })
        .await;
        assert!(
            db.info().job(done).await.unwrap().is_some(),
            "kept until the retention runs out"
        );
        clock.advance(Duration::from_secs(2 * 24 * 3600));
        let info = db.info();
        wait_until("the finished result to be pruned", T, || async {
            info.job(done).await.unwrap().is_none().then_some(())
        })
        .await;
        w.stop().await;
        assert_eq!(
            db.job(waiting).await.status(),
            JobStatus::Unprocessed,
            "live jobs are never pruned"
        );
        db.drop().await;
    }
}
