//! The Stakhanovise tables as seed code reads and writes them by position: `INSERT … VALUES`
//! without a column list and `SELECT *`, in the seeds' column order; seed 000's upserts on
//! its one-column keys; the upgrade to that order keeping every row.

use sk_runtime::{Job, JobStatus, SeedKeys};
use sk_tests::{recv, RunningWorker, TestDb};
use sqlx::Row;
use uuid::Uuid;

use super::super::{probe, worker, Record, T};

/// The first columns of `table` (in `schema`), in their order.
async fn columns(db: &TestDb, schema: &str, table: &str, n: usize) -> Vec<String> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT attname::text FROM pg_attribute
         WHERE attrelid = ($1 || '.' || $2)::regclass AND attnum > 0 AND NOT attisdropped
         ORDER BY attnum",
    )
    .bind(schema)
    .bind(table)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    names.into_iter().take(n).collect()
}

/// Seed 001's tables, column by column, as its document lists them.
const SEED_001: [(&str, &[&str]); 4] = [
    (
        "sk_tasks_queue_t",
        &[
            "task_id",
            "task_lock_handle_id",
            "task_type",
            "task_source",
            "task_payload",
            "task_priority",
            "task_posted_at_ts",
            "task_locked_until_ts",
        ],
    ),
    (
        "sk_task_results_t",
        &[
            "task_id",
            "task_type",
            "task_source",
            "task_payload",
            "task_status",
            "task_priority",
            "task_last_error",
            "task_error_count",
            "task_last_error_is_recoverable",
            "task_processing_time_milliseconds",
            "task_posted_at_ts",
            "task_first_processing_attempted_at_ts",
            "task_last_processing_attempted_at_ts",
            "task_processing_finalized_at_ts",
        ],
    ),
    (
        "sk_metrics_t",
        &[
            "metric_id",
            "metric_owner_process_id",
            "metric_category",
            "metric_value",
            "metric_last_updated",
        ],
    ),
    (
        "sk_task_execution_time_stats_t",
        &[
            "et_payload_type",
            "et_owner_process_id",
            "et_n_execution_cycles",
            "et_last_execution_time",
            "et_avg_execution_time",
            "et_fastest_execution_time",
            "et_longest_execution_time",
            "et_total_execution_time",
        ],
    ),
];

/// Writes and reads by position, as the seed's text orders the columns: every table
/// starts with the seed's columns in the seed's order, a positional INSERT of each lands
/// in the right columns, and sk reads the results row it wrote as the job's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_code_writes_and_reads_the_tables_by_position() {
    let db = TestDb::new().await;
    for (table, seed) in SEED_001 {
        assert_eq!(
            columns(&db, "public", table, seed.len()).await,
            seed,
            "{table}"
        );
    }
    let id = Uuid::new_v4();
    sqlx::raw_sql(&format!(
        "INSERT INTO sk_task_results_t VALUES ('{id}', 'record', 'Stakhanovise.Producer',
            '{{\"label\": \"by position\"}}', 6, 3, 'gateway down', 2, false, 12,
            now() - interval '1 minute', now() - interval '50 seconds', now() - interval '10 seconds', now());
         INSERT INTO sk_metrics_t VALUES ('tasks_processed', 'process-1', 'queue', 5, now());
         INSERT INTO sk_task_execution_time_stats_t VALUES ('record', 'process-1', 3, 10, 10, 5, 15, 30);"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let record = db.job(id).await;
    assert_eq!(
        (
            record.status(),
            record.priority,
            record.error_count,
            record.last_error_message.as_deref(),
            record.processing_time_ms,
            record.payload.as_deref(),
        ),
        (
            JobStatus::Fatal,
            3,
            2,
            Some("gateway down"),
            12,
            Some("{\"label\": \"by position\"}")
        )
    );
    // `SELECT *`, read by position as seed code does.
    let row = sqlx::query("SELECT * FROM sk_task_results_t")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<i32, _>(4),
            row.get::<i32, _>(5),
            row.get::<String, _>(6),
            row.get::<i32, _>(7),
            row.get::<i64, _>(9)
        ),
        (6, 3, "gateway down".to_owned(), 2, 12)
    );
    let row = sqlx::query("SELECT * FROM sk_metrics_t")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<String, _>(0),
            row.get::<String, _>(1),
            row.get::<String, _>(2),
            row.get::<i64, _>(3)
        ),
        (
            "tasks_processed".into(),
            "process-1".into(),
            "queue".into(),
            5
        )
    );
    let row = sqlx::query("SELECT * FROM sk_task_execution_time_stats_t")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let numbers: Vec<i64> = (2..8).map(|i| row.get(i)).collect();
    assert_eq!(
        (row.get::<String, _>(0), row.get::<String, _>(1), numbers),
        (
            "record".into(),
            "process-1".into(),
            vec![3, 10, 10, 5, 15, 30]
        )
    );
    db.drop().await;
}

/// Seed 000's upserts name one-column keys. With [`SeedKeys::OnePerName`] they find them,
/// a seed-001 writer's upsert and sk's workers land on the same row (their stats added
/// up), and switching back gives each process its own rows again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_upserts_work_on_its_keys_beside_seed_001_writers_and_sk() {
    let db = TestDb::new().await;
    let seed_000 = "INSERT INTO sk_metrics_t (metric_id, metric_category, metric_value)
            VALUES ('tasks_processed', 'queue', 1)
            ON CONFLICT (metric_id) DO UPDATE SET metric_value = sk_metrics_t.metric_value + 1;
        INSERT INTO sk_task_execution_time_stats_t (et_payload_type, et_n_execution_cycles,
            et_last_execution_time, et_avg_execution_time, et_fastest_execution_time,
            et_longest_execution_time, et_total_execution_time)
            VALUES ('record', 1, 40, 40, 40, 40, 40)
            ON CONFLICT (et_payload_type) DO UPDATE SET
                et_n_execution_cycles = sk_task_execution_time_stats_t.et_n_execution_cycles + 1,
                et_total_execution_time = sk_task_execution_time_stats_t.et_total_execution_time + 40;";
    let refused = sqlx::raw_sql(seed_000).execute(&db.pool).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("no unique or exclusion constraint"),
        "{refused}"
    );
    // A seed-001 process's row, there before the switch: folded into the one row.
    sqlx::raw_sql(
        "INSERT INTO sk_task_execution_time_stats_t VALUES ('record', 'process-1', 2, 10, 10, 5, 15, 20)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sk_runtime::set_seed_keys(db.pool.clone(), &Default::default(), SeedKeys::OnePerName)
        .await
        .unwrap();
    sqlx::raw_sql(seed_000).execute(&db.pool).await.unwrap();
    sqlx::raw_sql(seed_000).execute(&db.pool).await.unwrap();
    // Seed 000's positional writes, in its column order (four metric values, seven stats
    // values): the tables keyed as seed 000's take its order too.
    sqlx::raw_sql(
        "INSERT INTO sk_metrics_t VALUES ('positional', 'queue', 4, now());
         INSERT INTO sk_task_execution_time_stats_t VALUES ('positional', 1, 7, 7, 7, 7, 7);",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let positional: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT metric_value FROM sk_metrics_t WHERE metric_id = 'positional'),
                (SELECT et_total_execution_time FROM sk_task_execution_time_stats_t
                 WHERE et_payload_type = 'positional')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(positional, (4, 7));
    // A seed-001 writer names its columns here (its positional order is seed 001's).
    sqlx::raw_sql(
        "INSERT INTO sk_metrics_t (metric_id, metric_owner_process_id, metric_category, metric_value, metric_last_updated)
            VALUES ('tasks_processed', 'process-2', 'queue', 10, now())
            ON CONFLICT (metric_id, metric_owner_process_id)
            DO UPDATE SET metric_value = sk_metrics_t.metric_value + EXCLUDED.metric_value",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    for i in 0..3 {
        Record::new(format!("sk {i}"))
            .enqueue(&db.pool)
            .await
            .unwrap();
        recv(&mut rx, "sk's run", T).await;
    }
    sk_tests::wait_until("sk's runs in the stats", T, || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT et_n_execution_cycles FROM sk_task_execution_time_stats_t WHERE et_payload_type = 'record'",
        )
        .fetch_one(&db.pool)
        .await
        .ok()?;
        (n == 2 + 2 + 3).then_some(())
    })
    .await;
    w.stop().await;
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT et_payload_type, et_owner_process_id, et_n_execution_cycles
         FROM sk_task_execution_time_stats_t WHERE et_payload_type = 'record' ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows, [("record".into(), String::new(), 7)]);
    let metrics: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT metric_id, metric_owner_process_id, metric_value FROM sk_metrics_t
         WHERE metric_id = 'tasks_processed'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(metrics, [("tasks_processed".into(), String::new(), 12)]);

    sk_runtime::set_seed_keys(db.pool.clone(), &Default::default(), SeedKeys::PerProcess)
        .await
        .unwrap();
    sqlx::raw_sql(
        "INSERT INTO sk_task_execution_time_stats_t VALUES ('record', 'process-1', 1, 10, 10, 10, 10, 10)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let owners: Vec<String> = sqlx::query_scalar(
        "SELECT et_owner_process_id FROM sk_task_execution_time_stats_t
         WHERE et_payload_type = 'record' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(owners, ["", "process-1"]);
    db.drop().await;
}

/// A database at schema 14 with finished jobs in a range partition and in the default
/// partition: the upgrade to the seeds' order keeps both readable, the range partition
/// attached as it was (not rewritten), and the partitions made after it take the new order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_to_the_seed_order_keeps_every_partitions_rows() {
    let db = TestDb::new().await;
    let v14 = sk_runtime::Schema::new("v14", "sk_").unwrap();
    sk_runtime::__private::migrate_to(&db.pool, &v14, 14)
        .await
        .unwrap();
    let in_range = Uuid::now_v7();
    let foreign = Uuid::new_v4();
    let from = Uuid::from_u128(in_range.as_u128() & !((1u128 << 80) - 1));
    let to = Uuid::from_u128(from.as_u128() + (1u128 << 80));
    sqlx::raw_sql(&format!(
        "CREATE TABLE v14.sk_task_results_p_old (LIKE v14.sk_task_results_t INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
         ALTER TABLE v14.sk_task_results_t ATTACH PARTITION v14.sk_task_results_p_old
             FOR VALUES FROM ('{from}') TO ('{to}');
         INSERT INTO v14.sk_task_results_t (task_id, task_type, task_source, task_payload, task_queue,
             task_status, task_priority, task_posted_at_ts, task_error_count, task_last_error_message,
             task_processing_finalized_at_ts)
         VALUES ('{in_range}', 'record', 'v14', 'in range', 'mail', 6, 1, now(), 1, 'ranged', now()),
                ('{foreign}', 'record', 'v14', 'foreign', 'mail', 7, 2, now(), 0, NULL, now());"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let relfilenode = |db: &TestDb| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, sqlx::postgres::types::Oid>(
                "SELECT relfilenode FROM pg_class WHERE oid = 'v14.sk_task_results_p_old'::regclass",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let before = relfilenode(&db).await;
    sk_runtime::migrate(db.pool.clone(), &v14).await.unwrap();
    assert_eq!(
        relfilenode(&db).await,
        before,
        "the range partition is not rewritten"
    );
    let info = sk_runtime::QueueInfo::new(db.pool.clone()).schema(v14.clone());
    let ranged = info.job(in_range).await.unwrap().unwrap();
    assert_eq!(
        (
            ranged.status(),
            ranged.queue.as_str(),
            ranged.priority,
            ranged.last_error_message.as_deref(),
            ranged.payload.as_deref()
        ),
        (
            JobStatus::Fatal,
            "mail",
            1,
            Some("ranged"),
            Some("in range")
        )
    );
    let moved = info.job(foreign).await.unwrap().unwrap();
    assert_eq!(
        (moved.status(), moved.priority, moved.payload.as_deref()),
        (JobStatus::Cancelled, 2, Some("foreign"))
    );
    let partitions: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
         WHERE h.inhparent = 'v14.sk_task_results_t'::regclass ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        partitions.contains(&"sk_task_results_p_old".to_owned())
            && partitions.contains(&"sk_task_results_default".to_owned())
            && partitions.len() > 2,
        "{partitions:?}"
    );
    for name in partitions.iter().filter(|p| *p != "sk_task_results_p_old") {
        assert_eq!(
            columns(&db, "v14", name, SEED_001[1].1.len()).await,
            SEED_001[1].1,
            "{name}"
        );
    }
    db.drop().await;
}

/// The results row keeps the payload of a job that succeeded, as seed 001's does: a seed
/// producer's job and sk's own alike, read in SQL as a seed reader would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_succeeded_jobs_results_row_keeps_its_payload() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    let seed = super::post_as_seed_producer_with_id(
        &db,
        Uuid::new_v4(),
        "record",
        Some(r#"{"label":"from the seed"}"#),
    )
    .await;
    let own = Record::new("from sk".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    for _ in 0..2 {
        recv(&mut rx, "a run", T).await;
    }
    for (id, payload) in [
        (seed, r#"{"label":"from the seed"}"#),
        (own, r#"{"label":"from sk"}"#),
    ] {
        db.wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        let row: (i32, Option<String>) = sqlx::query_as(
            "SELECT task_status, task_payload FROM sk_task_results_t WHERE task_id = $1",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(row, (3, Some(payload.to_owned())));
    }
    w.stop().await;
    db.drop().await;
}

/// Seed 001's dequeue function, as its page gives it.
const SEED_001_DEQUEUE: &str = r#"CREATE OR REPLACE FUNCTION public.sk_try_dequeue_task (IN select_types character varying[], IN exclude_ids uuid[], IN ref_now timestamp with time zone)
	RETURNS TABLE (task_id uuid, task_lock_handle_id bigint, task_type character varying, task_source character varying, task_payload text, task_priority integer, task_posted_at_ts timestamp with time zone, task_locked_until_ts timestamp with time zone)
	LANGUAGE plpgsql
	AS $$
	DECLARE
		n_select_types integer = CARDINALITY(select_types);
	BEGIN
		RETURN QUERY
		WITH sk_dequeued_task AS
			(DELETE FROM sk_tasks_queue_t td WHERE td.task_id = (
				SELECT t0.task_id
						FROM sk_tasks_queue_t t0
						WHERE (t0.task_type = ANY(select_types) OR n_select_types = 0)
							AND t0.task_locked_until_ts < ref_now
							AND t0.task_id <> ALL(exclude_ids)
						ORDER BY t0.task_priority ASC,
							t0.task_locked_until_ts ASC,
							t0.task_lock_handle_id ASC
						LIMIT 1
						FOR UPDATE SKIP LOCKED
			) RETURNING *) SELECT sdt.* FROM sk_dequeued_task sdt;
	END;
$$;"#;

/// The seed's own `CREATE OR REPLACE FUNCTION sk_try_dequeue_task`, run over an sk
/// database, succeeds and breaks every call (its `RETURNING *` answers sk's whole row);
/// a second migrate said the schema was up to date. Now migrate (a worker's start too)
/// finds the function is not sk's and puts sk's back; and the job a seed consumer takes
/// keeps its payload in its record, the only one it has once its queue row is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_own_dequeue_text_is_put_right_by_migrate() {
    let db = TestDb::new().await;
    db.execute(SEED_001_DEQUEUE).await;
    let dequeue = "SELECT task_id, task_payload FROM sk_try_dequeue_task('{}', '{}', now())";
    let broken = sqlx::query(dequeue)
        .fetch_optional(&db.pool)
        .await
        .unwrap_err();
    assert!(
        broken.to_string().contains("does not match"),
        "the seed's text over sk's table: {broken}"
    );
    sk_runtime::migrate(&db.pool, &sk_runtime::Schema::default())
        .await
        .unwrap();
    let id = Record::new("dequeued by a seed consumer".into())
        .with_tenant("acme")
        .enqueue(&db.pool)
        .await
        .unwrap();
    let (taken, payload): (Uuid, Option<String>) =
        sqlx::query_as(dequeue).fetch_one(&db.pool).await.unwrap();
    assert_eq!(taken, id);
    let record = sk_runtime::Client::new(db.pool.clone())
        .job(id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.status(),
        JobStatus::Processing,
        "taken by the consumer"
    );
    assert_eq!(record.payload, payload, "the record keeps the payload");
    assert_eq!(record.tenant.as_deref(), Some("acme"));
    // Migrate again: sk's own function is left as it is.
    sk_runtime::migrate(&db.pool, &sk_runtime::Schema::default())
        .await
        .unwrap();
    assert!(sqlx::query(dequeue)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
        .is_none());
    db.drop().await;
}
