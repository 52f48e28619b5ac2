//! `Work`: claims, outcomes and leases, each operation's contract on every backend.

use chrono::{Duration as Span, Utc};
use sk_runtime::__driver::{Claimed, Driver};
use sk_runtime::JobStatus;
use sk_tests::each_backend;
use uuid::Uuid;

use super::super::Record;

const RECORD: &[&str] = &["record"];
const LEASE: Span = Span::seconds(30);

fn ids(claimed: &[Claimed]) -> Vec<Uuid> {
    claimed.iter().map(|c| c.id).collect()
}

fn leases(claimed: &[Claimed]) -> Vec<(Uuid, i32)> {
    claimed.iter().map(|c| (c.id, c.attempt)).collect()
}

each_backend! {
    /// A claim takes due jobs by priority, then not-before time, then posting order, at
    /// most its limit; a job not yet due is not taken; each lease is attempt 1.
    async fn a_claim_takes_priority_then_time_then_posting_order(db) {
        let base = Utc::now();
        let post = |label: &str, priority: i32, at: chrono::DateTime<Utc>| {
            Record::new(label.into()).with_priority(priority).run_at(at)
        };
        let low = post("low", 5, base - Span::seconds(3)).enqueue(&db.pool).await.unwrap();
        let early = post("early", 0, base - Span::seconds(2)).enqueue(&db.pool).await.unwrap();
        let first = post("first", 0, base - Span::seconds(1)).enqueue(&db.pool).await.unwrap();
        let second = post("second", 0, base - Span::seconds(1)).enqueue(&db.pool).await.unwrap();
        let later = post("later", -5, base + Span::hours(1)).enqueue(&db.pool).await.unwrap();
        // A time in the past is the posting time: not-before is never before it.
        let now = Utc::now();
        let driver = Driver::new(db.pool.clone(), "w1");
        // Leases past the last claim below, which would take them back otherwise.
        let long = now + Span::hours(3);
        let claimed = driver.claim(RECORD, 3, now, long).await.unwrap();
        assert_eq!(ids(&claimed), [early, first, second]);
        assert!(claimed.iter().all(|c| c.attempt == 1 && c.task_type == "record"));
        let rest = driver.claim(RECORD, 10, now, long).await.unwrap();
        assert_eq!(ids(&rest), [low], "the job not yet due is left");
        assert!(driver.claim(&["other"], 10, now + Span::hours(2), now + LEASE).await.unwrap().is_empty(),
            "a claim takes only its task types");
        let due = driver.claim(RECORD, 10, now + Span::hours(2), long).await.unwrap();
        assert_eq!(ids(&due), [later]);
        db.drop().await;
    }
}

each_backend! {
    /// A leased job is claimed by no one until its lease runs out; then the next claim
    /// is attempt 2, and the first lease's completion changes nothing (fenced).
    async fn a_lease_holds_until_it_runs_out_and_fences_the_old_holder(db) {
        let id = Record::new("x".into()).enqueue(&db.pool).await.unwrap();
        let now = Utc::now();
        let (a, b) = (Driver::new(db.pool.clone(), "a"), Driver::new(db.pool.clone(), "b"));
        let first = a.claim(RECORD, 10, now, now + LEASE).await.unwrap();
        assert_eq!(leases(&first), [(id, 1)]);
        assert!(b.claim(RECORD, 10, now + Span::seconds(29), now + LEASE).await.unwrap().is_empty());
        let after = now + LEASE + Span::seconds(1);
        let second = b.claim(RECORD, 10, after, after + LEASE).await.unwrap();
        assert_eq!(leases(&second), [(id, 2)]);
        assert!(a.complete(&[(id, 1)], after).await.unwrap().is_empty(), "the old lease is fenced");
        assert_eq!(db.job(id).await.status(), JobStatus::Processing);
        assert_eq!(b.complete(&[(id, 2)], after).await.unwrap(), [id]);
        assert_eq!(db.job(id).await.status(), JobStatus::Processed);
        assert!(b.complete(&[(id, 2)], after).await.unwrap().is_empty(), "once only");
        db.drop().await;
    }
}

each_backend! {
    /// A completion holds only for its own worker and attempt.
    async fn a_completion_is_fenced_by_worker_and_attempt(db) {
        let id = Record::new("x".into()).enqueue(&db.pool).await.unwrap();
        let now = Utc::now();
        let (a, b) = (Driver::new(db.pool.clone(), "a"), Driver::new(db.pool.clone(), "b"));
        assert_eq!(leases(&a.claim(RECORD, 10, now, now + LEASE).await.unwrap()), [(id, 1)]);
        assert!(b.complete(&[(id, 1)], now).await.unwrap().is_empty(), "another worker");
        assert!(a.complete(&[(id, 2)], now).await.unwrap().is_empty(), "another attempt");
        assert_eq!(db.job(id).await.status(), JobStatus::Processing);
        assert_eq!(a.complete(&[(id, 1)], now).await.unwrap(), [id]);
        assert_eq!(db.job(id).await.status(), JobStatus::Processed);
        db.drop().await;
    }
}

each_backend! {
    /// A failure to retry makes the job due at its retry time, as its next attempt; a
    /// final one ends it fatal with its message; a failure of a lease not held changes
    /// nothing.
    async fn a_failure_retries_at_its_time_or_ends_the_job(db) {
        let retried = Record::new("retried".into()).enqueue(&db.pool).await.unwrap();
        let ended = Record::new("ended".into()).enqueue(&db.pool).await.unwrap();
        let now = Utc::now();
        let driver = Driver::new(db.pool.clone(), "w");
        let claimed = driver.claim(RECORD, 10, now, now + LEASE).await.unwrap();
        assert_eq!(ids(&claimed), [retried, ended]);
        assert_eq!(driver.fail(&[(retried, 2)], None, "wrong attempt", now).await.unwrap(), [false]);
        let at = now + Span::seconds(60);
        assert_eq!(driver.fail(&[(retried, 1)], Some(at), "again later", now).await.unwrap(), [true]);
        assert_eq!(driver.fail(&[(ended, 1)], None, "for good", now).await.unwrap(), [true]);
        let record = db.job(ended).await;
        assert_eq!(record.status(), JobStatus::Fatal);
        assert_eq!(record.last_error_message.as_deref(), Some("for good"));
        assert_eq!(db.job(retried).await.status(), JobStatus::Error);
        assert!(driver.claim(RECORD, 10, at - Span::seconds(1), at + LEASE).await.unwrap().is_empty());
        let again = driver.claim(RECORD, 10, at, at + LEASE).await.unwrap();
        assert_eq!(leases(&again), [(retried, 2)]);
        db.drop().await;
    }
}

each_backend! {
    /// Extending renews only the leases this worker holds; giving back hands the job back
    /// due at the given time without using an attempt.
    async fn extend_renews_held_leases_and_give_back_keeps_the_attempt(db) {
        let id = Record::new("x".into()).enqueue(&db.pool).await.unwrap();
        let now = Utc::now();
        let (a, b) = (Driver::new(db.pool.clone(), "a"), Driver::new(db.pool.clone(), "b"));
        assert_eq!(leases(&a.claim(RECORD, 10, now, now + LEASE).await.unwrap()), [(id, 1)]);
        assert!(b.extend(&[(id, 1)], now + Span::hours(1)).await.unwrap().is_empty(), "not b's");
        assert_eq!(a.extend(&[(id, 1)], now + Span::hours(1)).await.unwrap(), [id]);
        let past_first_lease = now + LEASE + Span::seconds(1);
        assert!(b.claim(RECORD, 10, past_first_lease, past_first_lease + LEASE).await.unwrap().is_empty(),
            "the extended lease holds past the first");
        assert_eq!(b.give_back(&[(id, 1)], now).await.unwrap(), 0, "not b's to give back");
        let at = now + Span::seconds(10);
        assert_eq!(a.give_back(&[(id, 1)], at).await.unwrap(), 1);
        assert!(b.claim(RECORD, 10, at - Span::seconds(1), at + LEASE).await.unwrap().is_empty());
        let again = b.claim(RECORD, 10, at, at + LEASE).await.unwrap();
        assert_eq!(leases(&again), [(id, 1)], "the attempt was not used");
        assert!(a.extend(&[(id, 1)], at + Span::hours(1)).await.unwrap().is_empty(), "a gave it back");
        db.drop().await;
    }
}

each_backend! {
    /// A claim that names paused queues skips their jobs.
    async fn a_claim_skips_paused_queues(db) {
        let paused = Record::new("p".into()).with_queue("paused").enqueue(&db.pool).await.unwrap();
        let open = Record::new("o".into()).enqueue(&db.pool).await.unwrap();
        let now = Utc::now();
        let driver = Driver::new(db.pool.clone(), "w");
        let claimed = driver.claim_from(RECORD, &["paused"], 10, now, now + LEASE).await.unwrap();
        assert_eq!(ids(&claimed), [open]);
        let rest = driver.claim(RECORD, 10, now, now + LEASE).await.unwrap();
        assert_eq!(ids(&rest), [paused]);
        assert_eq!(rest[0].queue, "paused");
        db.drop().await;
    }
}

each_backend! {
    /// A completion retried after its reply was lost reads back what it committed: the
    /// jobs this worker recorded as succeeded, not another worker's, not one still held.
    async fn a_completion_reads_back_its_own_committed_outcome(db) {
        let done = Record::new("done".into()).enqueue(&db.pool).await.unwrap();
        let held = Record::new("held".into()).enqueue(&db.pool).await.unwrap();
        let now = Utc::now();
        let (a, b) = (Driver::new(db.pool.clone(), "a"), Driver::new(db.pool.clone(), "b"));
        assert_eq!(ids(&a.claim(RECORD, 10, now, now + LEASE).await.unwrap()), [done, held]);
        assert_eq!(a.complete(&[(done, 1)], now).await.unwrap(), [done]);
        assert!(a.complete(&[(done, 1)], now).await.unwrap().is_empty(), "the retry finds no lease");
        assert_eq!(a.succeeded_here(&[done, held]).await.unwrap(), [done]);
        assert!(b.succeeded_here(&[done, held]).await.unwrap().is_empty());
        db.drop().await;
    }
}
