//! Where a PostgreSQL burn-down's cost goes: each burn-down is a probe that notes the
//! server's CPU time and write-ahead log per job, and with `SK_BENCH_PROFILE=DIR` also
//! records, for that stretch alone, the whole machine's CPU profile (`perf record -a -g`),
//! the server's statements (`pg_stat_statements`, reset at the start) and the log's range
//! (for `pg_waldump --stats`). `examples/profile_postgres.sh` runs it on a server of its
//! own and prints the three side by side.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::figures::{server_cpu_seconds, Cost, FIGURES};
use super::{Bench, BoxError};

/// A burn-down being measured: where the cost stood at its start, and the profiler.
pub(super) struct Probe {
    before: Cost,
    started: Option<(PathBuf, Child)>,
}

impl Bench {
    /// The PostgreSQL server's CPU time and write-ahead log so far. The log sets how
    /// often the server checkpoints, and the full-page images after each checkpoint make
    /// a burn-down's writes briefly slower.
    async fn cost(&self) -> Result<Cost, BoxError> {
        let log_bytes: f64 =
            sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8")
                .fetch_one(&self.pool)
                .await?;
        Ok(Cost {
            cpu_seconds: server_cpu_seconds(&["postgres"])?,
            log_bytes,
        })
    }

    /// The start of a burn-down's measured stretch.
    pub(super) async fn probe(&self) -> Result<Probe, BoxError> {
        let Some(dir) = std::env::var_os("SK_BENCH_PROFILE").map(PathBuf::from) else {
            return Ok(Probe {
                before: self.cost().await?,
                started: None,
            });
        };
        std::fs::create_dir_all(&dir)?;
        let name = format!("{}-{}", FIGURES.current(), std::process::id());
        let stem = dir.join(&name);
        sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(&self.pool)
            .await?;
        let data = stem.with_extension("perf.data");
        let _ = std::fs::remove_file(&data);
        let perf = Command::new("perf")
            .args(["record", "-a", "-g", "-q", "-o"])
            .arg(&data)
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("perf record: {e}"))?;
        // perf writes its file's header once it records; the stretch starts after.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(&data).map_or(0, |m| m.len()) == 0 {
            if Instant::now() > deadline {
                return Err("perf record did not start within 10 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Probe {
            before: self.cost().await?,
            started: Some((stem, perf)),
        })
    }

    /// The end of the stretch `probe` started, over `n` jobs: notes the server's CPU and
    /// log per job and, when profiling, writes `{measure}-{pid}.statements.txt` and
    /// `.wal-range` beside the perf data.
    pub(super) async fn probe_end(&self, probe: Probe, n: u64) -> Result<(), BoxError> {
        let after = self.cost().await?;
        FIGURES.note_cost(probe.before, after, n);
        let Some((stem, mut perf)) = probe.started else {
            return Ok(());
        };
        let stopped = Command::new("kill")
            .args(["-INT", &perf.id().to_string()])
            .status()?;
        if !stopped.success() {
            return Err("could not stop perf record".into());
        }
        perf.wait()?;
        let lsn = |bytes: f64| {
            let b = bytes as u64;
            format!("{:X}/{:X}", b >> 32, b & 0xFFFF_FFFF)
        };
        std::fs::write(
            stem.with_extension("wal-range"),
            format!("{} {}\n", lsn(probe.before.log_bytes), lsn(after.log_bytes)),
        )?;
        let rows: Vec<(i64, f64, i64, i64, i64, String)> = sqlx::query_as(
            "SELECT calls, total_exec_time, rows, shared_blks_dirtied + shared_blks_written,
                    wal_bytes::int8, regexp_replace(query, '\\s+', ' ', 'g')
             FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 20",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut text = format!(
            "{n} jobs\n{:>8} {:>10} {:>9} {:>10} {:>10} {:>8}  query\n",
            "calls", "ms", "rows", "blks_dirt", "wal_bytes", "wal/job"
        );
        for (calls, ms, rows, blocks, wal, query) in rows {
            let query: String = query.chars().take(160).collect();
            text.push_str(&format!(
                "{calls:>8} {ms:>10.0} {rows:>9} {blocks:>10} {wal:>10} {:>8.1}  {query}\n",
                wal as f64 / n as f64
            ));
        }
        std::fs::write(stem.with_extension("statements.txt"), text)?;
        Ok(())
    }
}
