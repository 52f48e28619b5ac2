//! Queues over two databases (`Router`, `Client::across`, `sk` with two
//! `--database-url`): each job stored in its home database, counts summed, lists merged,
//! actions sent where the job is, dependencies kept in one database, and a worker per
//! database running it all. A module of the `queue` test binary.

use std::collections::HashSet;

use sk_runtime::{job, CancelOutcome, CountBy, JobError, JobFilter, JobStatus, Pool, Router};
use sk_tests::{each_backend, Db, RunningWorker, TestBackend};
use uuid::Uuid;

use super::T;

#[job]
async fn routed(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// How many jobs of `queue` the database holds, live or ended.
async fn held<B: TestBackend>(db: &Db<B>, queue: &str) -> i64
where
    sqlx::Pool<B>: Into<Pool>,
{
    let live = "SELECT COUNT(*) FROM sk_tasks_queue_t WHERE task_queue = $1";
    let ended = "SELECT COUNT(*) FROM sk_task_results_t WHERE task_queue = $1 AND task_id NOT IN (SELECT task_id FROM sk_tasks_queue_t)";
    db.scalar(live, Some(queue)).await.unwrap_or(0)
        + db.scalar(ended, Some(queue)).await.unwrap_or(0)
}

/// Runs `sk` over the databases of `urls` (in-process): its exit code, output and error
/// output.
async fn sk_over(urls: [&str; 2], args: &[&str]) -> (u8, String, String) {
    let mut all = vec!["sk"];
    for url in urls {
        all.extend(["--database-url", url]);
    }
    all.extend_from_slice(args);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = sk_cli::run(all, &mut out, &mut err).await;
    let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8 output");
    (code, text(out), text(err))
}

async fn over_two<B: TestBackend>(db: Db<B>)
where
    sqlx::Pool<B>: Into<Pool>,
    Pool: From<sqlx::Pool<B>>,
{
    let other = Db::<B>::new().await;
    let router = Router::new([db.pool.clone(), other.pool.clone()])
        .unwrap()
        .pin("left", 0)
        .unwrap()
        .pin("right", 1)
        .unwrap();
    let mut left = Vec::new();
    for n in 0..3 {
        left.push(
            router
                .enqueue(Routed::new(n).with_queue("left"))
                .await
                .unwrap(),
        );
    }
    let right = router
        .enqueue_many((0..2).map(|n| Routed::new(n).with_queue("right")))
        .await
        .unwrap();
    let mixed = router
        .enqueue_many([
            Routed::new(10).with_queue("left"),
            Routed::new(11).with_queue("right"),
            Routed::new(12).with_queue("left"),
        ])
        .await
        .unwrap();
    assert_eq!((held(&db, "left").await, held(&db, "right").await), (5, 0));
    assert_eq!(
        (held(&other, "left").await, held(&other, "right").await),
        (0, 3)
    );
    assert_eq!(
        other.job(mixed[1]).await.queue,
        "right",
        "ids come back in order"
    );
    assert_eq!(db.job(mixed[2]).await.queue, "left");

    // Counts summed, by queue and in all.
    let client = router.client();
    assert_eq!(client.databases(), 2);
    let by_queue: Vec<(Option<String>, i64)> = client
        .count_by(CountBy::Queue)
        .await
        .unwrap()
        .into_iter()
        .map(|g| (g.key, g.available))
        .collect();
    assert_eq!(
        by_queue,
        [(Some("left".to_owned()), 5), (Some("right".to_owned()), 3)]
    );
    assert_eq!(client.counts().await.unwrap().available, 8);

    // The list merged newest first, paged across both without a job twice or missed.
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let page = client.jobs(&JobFilter::new(), after, 3).await.unwrap();
        listed.extend(page.jobs.iter().map(|j| j.id));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let all: HashSet<Uuid> = left.iter().chain(&right).chain(&mixed).copied().collect();
    assert_eq!(listed.len(), 8, "{listed:?}");
    assert_eq!(listed.iter().copied().collect::<HashSet<_>>(), all);
    assert!(listed.windows(2).all(|w| w[0] > w[1]), "newest first");

    // An action goes to the database that holds its job.
    assert_eq!(
        client.cancel(right[0]).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(other.job(right[0]).await.status(), JobStatus::Cancelled);
    assert_eq!(
        client.job(right[0]).await.unwrap().map(|r| r.status()),
        Some(JobStatus::Cancelled)
    );
    assert_eq!(
        client.cancel(Uuid::now_v7()).await.unwrap(),
        CancelOutcome::NotFound
    );
    // A queue's pause reaches every database; the audit trail merges both.
    assert!(client.pause("right").await.unwrap());
    let right_state = client.queues().await.unwrap();
    let right_state = right_state.iter().find(|q| q.name == "right").unwrap();
    assert!(right_state.paused_at.is_some());
    assert_eq!(right_state.available, 2);
    assert!(client.resume("right").await.unwrap());
    let actions: Vec<String> = client
        .audit(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions.iter().filter(|a| *a == "resume").count(),
        2,
        "{actions:?}"
    );

    // A job waits only on jobs of its own database.
    let refused = router
        .enqueue(Routed::new(20).with_queue("left").after([right[1]]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!(
            "job {} (routed, queue \"right\") lives in database 1",
            right[1]
        )) && refused.contains("home is database 0"),
        "{refused}"
    );
    assert_eq!(held(&db, "left").await, 5, "nothing stored");
    let dependant = router
        .enqueue(Routed::new(21).with_queue("right").after([right[1]]))
        .await
        .unwrap();

    // By name, through the client: stored in the home of the job's queue.
    let by_name = client
        .enqueue_json("routed", serde_json::json!({ "n": 30 }))
        .await
        .unwrap();
    let home = router.routes().home("default", None);
    let home_db = if home == 0 { &db } else { &other };
    assert_eq!(home_db.job(by_name).await.queue, "default");

    // `sk` over both databases sums the same way and finds a job in either.
    let urls = [db.url.as_str(), other.url.as_str()];
    let (code, out, err) = sk_over(urls, &["status", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["databases"], 2, "{out}");
    let queues = status["queues"].as_array().unwrap();
    let available = |name: &str| {
        queues
            .iter()
            .find(|q| q["key"] == name)
            .map(|q| (q["available"].as_i64(), q["pending"].as_i64()))
    };
    assert_eq!(available("left"), Some((Some(5), Some(0))), "{out}");
    assert_eq!(available("right"), Some((Some(2), Some(1))), "{out}");
    let (code, out, err) = sk_over(urls, &["status"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("over 2 databases, summed"), "{out}");
    let shown = right[1].to_string();
    let (code, out, err) = sk_over(urls, &["job", &shown]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&shown), "{out}");
    let (code, _, err) = sk_over(urls, &["--pin", "left=2", "status"]).await;
    assert_eq!(code, 1, "a pin past the databases");
    assert!(err.contains("database 2"), "{err}");

    // A worker per database runs it all; waiting finds each job's database.
    let workers = [
        RunningWorker::start(super::worker(&db, &["routed"])),
        RunningWorker::start(super::worker(&other, &["routed"])),
    ];
    for id in [left[0], mixed[1], dependant, by_name] {
        let done = client.wait(id, T).await.unwrap();
        assert_eq!(done.status(), JobStatus::Processed, "{id}");
    }
    sk_tests::wait_until("both databases drained", T, || async {
        let counts = client.counts().await.ok()?;
        (counts.available + counts.pending + counts.running == 0).then_some(())
    })
    .await;
    assert_eq!(
        client.counts().await.unwrap().status(JobStatus::Processed),
        9
    );
    for w in workers {
        w.stop().await;
    }
    other.drop().await;
    db.drop().await;
}

each_backend! {
    /// Two databases as one system through a router and the client over both.
    async fn a_router_keeps_each_queue_in_its_home_and_the_client_works_over_both(db) {
        over_two(db).await;
    }
}
