//! Insight on a replica: a `Client` (and the dashboard over it) that reads from the
//! streaming standby of a replicated cluster (`sk_tests::cluster`) while workers burn a
//! backlog down on the primary, and acts on the primary.

use sk_cli::web::{self, WebOptions};
use sk_runtime::{Client, CountBy, Enqueue};
use sk_tests::cluster::Cluster;
use sqlx::postgres::PgPoolOptions;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

/// `GET path` of the dashboard at `address`: the status and the body.
async fn get(address: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned());
    (status, body.unwrap_or_default())
}

/// The seconds behind the primary the overview at `address` shows.
async fn lag_shown(address: &str) -> f64 {
    let (status, page) = get(address, "/").await;
    assert_eq!(status, 200, "{page}");
    let at = page
        .find("Read from a replica, ")
        .expect("the replica's line")
        + 21;
    let end = page[at..].find(" s behind").expect("its lag") + at;
    page[at..end].parse().expect("a number of seconds")
}

/// Waiting jobs of `queue` as `client` counts them.
async fn waiting(client: &Client, queue: &str) -> i64 {
    client
        .count_by(CountBy::Queue)
        .await
        .unwrap()
        .iter()
        .find(|g| g.key.as_deref() == Some(queue))
        .map_or(0, |g| g.available)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insight_reads_the_replica_and_actions_go_to_the_primary() {
    // The cluster starts beside the fault test before this one (see `failover`).
    let cluster = Cluster::start(true).await;
    let _serial = SERIAL.lock().await;
    let db = Db::<sqlx::Postgres>::on(&cluster.url()).await;
    db.execute(super::fault_runs::<sqlx::Postgres>()).await;
    let standby = 1 - cluster.primary().await.expect("a primary");
    let replica = PgPoolOptions::new()
        .max_connections(4)
        .connect(&cluster.node_url(standby))
        .await
        .unwrap();
    let on_primary = Client::new(db.pool.clone());
    let client = Client::new(db.pool.clone()).insight_from(replica.clone());

    // A burn-down on the primary.
    for _ in 0..4 {
        Burn::enqueue_many(&db.pool, (0..5_000).map(|_| Burn::new(1)))
            .await
            .unwrap();
    }
    let url = cluster.url();
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "2000",
        "--poll-ms",
        "100",
    ];
    let mut workers = [
        Proc::spawn(&url, "replica-a", &args),
        Proc::spawn(&url, "replica-b", &args),
    ];
    wait_processed(&db, 2_000, Duration::from_secs(60)).await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(web::serve(client.clone(), listener, WebOptions::default()));
    for path in ["/", "/queues", "/jobs", "/errors", "/types/burn", "/audit"] {
        let (status, page) = get(&address, path).await;
        assert_eq!(status, 200, "{path} under the burn-down: {page}");
    }
    let streaming = lag_shown(&address).await;

    // The replica stops replaying: what the primary gains from now on is not read.
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&replica)
        .await
        .unwrap();
    assert!(client.pause("held").await.unwrap(), "paused on the primary");
    let held = (0..50).map(|_| Enqueue::new(Burn::new(1)).with_queue("held"));
    Enqueue::enqueue_many(&db.pool, held).await.unwrap();
    assert_eq!(waiting(&on_primary, "held").await, 50);
    assert_eq!(waiting(&client, "held").await, 0, "read on the replica");
    let behind = wait_until(
        "the replica to fall behind",
        Duration::from_secs(30),
        || async {
            let lag = client.replica_lag().await.unwrap().expect("a replica");
            (lag > Duration::from_millis(500)).then_some(lag)
        },
    )
    .await;
    let shown = lag_shown(&address).await;
    assert!(shown >= 0.5, "the overview shows the lag: {shown} s");
    let (_, page) = get(&address, "/queues").await;
    assert!(!page.contains("held"), "the queues page reads the replica");
    // Actions, and what they decide on, go to the primary.
    assert!(
        client.resume("held").await.unwrap(),
        "resumed on the primary"
    );

    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&replica)
        .await
        .unwrap();
    wait_until(
        "the replica to catch up",
        Duration::from_secs(60),
        || async {
            let lag = client.replica_lag().await.unwrap()?;
            let queues = client.queues().await.unwrap();
            (lag < Duration::from_secs(1) && queues.iter().any(|q| q.name == "held")).then_some(())
        },
    )
    .await;
    wait_processed(&db, 20_050, Duration::from_secs(120)).await;
    for w in &mut workers {
        w.signal("TERM");
        assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
    }
    report(&format!(
        "insight on a replica: 20,050 jobs burnt down on the primary; lag shown {streaming:.1} s \
         while streaming, {shown:.1} s with replay paused ({:.1} s measured)",
        behind.as_secs_f64()
    ));
    db.drop().await;
}
