//! The PostgreSQL bench's measures, in the order `bench` runs them: each named one that
//! `--only` takes, beside its baseline (`Bench::measure_pair`), then the lines of the
//! figures it noted.

use super::*;

pub(super) async fn run() -> Result<(), BoxError> {
    let args = args()?;
    eprintln!("bench: {} on {}", machine(), args.backend);
    if args.backend == "sqlite" {
        return sqlite::run(args).await;
    }
    if args.backend == "mysql" {
        return mysql::run(args).await;
    }
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(&url)
        .await?;
    let mut b = Bench {
        pool,
        schema: Schema::new("sk_bench", "sk_")?,
        args,
        results: Vec::new(),
        ratios: Vec::new(),
    };
    b.reset().await?;

    if b.wants("enqueue_single") {
        let n = b.args.single;
        b.measure_pair(
            ("enqueue_single", "jobs/s", &|b| {
                Box::pin(b.enqueue_single(n))
            }),
            ("raw_insert_single", "rows/s", &|b| {
                Box::pin(b.raw_insert_single(n))
            }),
        )
        .await?;
        b.measure_pair(
            ("enqueue_single", "jobs/s", &|b| {
                Box::pin(b.enqueue_single(n))
            }),
            ("min_insert_single", "rows/s", &|b| {
                Box::pin(b.min_insert_single(n))
            }),
        )
        .await?;
    }
    if b.wants("enqueue_bulk") {
        let n = b.args.jobs;
        b.measure_pair(
            ("enqueue_bulk", "jobs/s", &|b| Box::pin(b.enqueue_bulk(n))),
            ("raw_insert_bulk", "rows/s", &|b| {
                Box::pin(b.raw_insert_bulk(n))
            }),
        )
        .await?;
        b.measure_pair(
            ("enqueue_bulk", "jobs/s", &|b| Box::pin(b.enqueue_bulk(n))),
            ("raw_copy_bulk", "rows/s", &|b| Box::pin(b.raw_copy_bulk(n))),
        )
        .await?;
        b.measure_pair(
            ("enqueue_bulk", "jobs/s", &|b| Box::pin(b.enqueue_bulk(n))),
            ("min_insert_bulk", "rows/s", &|b| {
                Box::pin(b.min_insert_bulk(n))
            }),
        )
        .await?;
        b.measure_pair(
            ("enqueue_bulk", "jobs/s", &|b| Box::pin(b.enqueue_bulk(n))),
            ("min_copy_bulk", "rows/s", &|b| Box::pin(b.min_copy_bulk(n))),
        )
        .await?;
    }
    if b.wants("burn_down") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
            ("raw_burn_down", "jobs/s", &|b| Box::pin(b.raw_burn_down(n))),
        )
        .await?;
        b.measure_pair(
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
            ("min_burn_down", "jobs/s", &|b| Box::pin(b.min_burn_down(n))),
        )
        .await?;
    }
    if b.wants("burn_down_c16") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
            ("raw_burn_down", "jobs/s", &|b| Box::pin(b.raw_burn_down(n))),
        )
        .await?;
        b.measure_pair(
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
            ("min_burn_down", "jobs/s", &|b| Box::pin(b.min_burn_down(n))),
        )
        .await?;
        b.measure_pair(
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_no_history") {
        // A worker that keeps no history of successes, beside one that does, both timed
        // by the wall clock; then against the minimal queue.
        let n = b.args.jobs;
        b.measure_pair(
            ("burn_down_c16_no_history", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Forgotten))
            }),
            ("burn_down_c16_wall", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Walled))
            }),
        )
        .await?;
        b.measure_pair(
            ("burn_down_c16_no_history", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Forgotten))
            }),
            ("min_burn_down", "jobs/s", &|b| Box::pin(b.min_burn_down(n))),
        )
        .await?;
    }
    if b.wants("burn_down_rated") {
        // A rate limit that never binds: what its claim (the limit's row locked, read
        // and written in the claim's transaction) costs.
        let n = b.args.jobs;
        let open = RateLimit::new(1_000_000_000, Duration::from_secs(1))?;
        b.measure_pair(
            ("burn_down_c16_rated", "jobs/s", &|b| {
                Box::pin(b.burn_down_rated(n, 16, open))
            }),
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
        )
        .await?;
        // One that binds: the drain against the limit.
        let tight = RateLimit::new(20_000, Duration::from_secs(1))?;
        b.measure_pair(
            ("burn_down_c16_at_20000_per_s", "jobs/s", &|b| {
                Box::pin(b.burn_down_rated(n.min(100_000), 16, tight))
            }),
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_fair") {
        // The same no-ops, of 8 tenants, claimed fairly across them: what the tenants'
        // probes and per-tenant claims cost.
        let n = b.args.jobs;
        b.measure_pair(
            ("burn_down_c16_fair", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Fair))
            }),
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_tenant_limit") {
        let n = b.args.jobs;
        b.measure_pair(
            ("burn_down_c16_tenant_limit", "jobs/s", &|b| {
                Box::pin(b.burn_down_tenant_limit(n, 16))
            }),
            ("burn_down_c16", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 16, Load::Noop))
            }),
        )
        .await?;
        b.measure_pair(
            ("burn_down_c16_tenant_rate", "jobs/s", &|b| {
                Box::pin(b.burn_down_tenant_rate(n, 16))
            }),
            ("burn_down_c16_tenant_limit", "jobs/s", &|b| {
                Box::pin(b.burn_down_tenant_limit(n, 16))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_c1") {
        let n = b.args.single;
        b.measure_pair(
            ("burn_down_c1", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, 1, Load::Noop))
            }),
            ("raw_one_per_round_trip", "jobs/s", &|b| {
                Box::pin(b.raw_one_per_round_trip(n))
            }),
        )
        .await?;
    }
    if b.wants("failure_storm") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("failure_storm", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Flaky))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_traced") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_traced", "jobs/s", &|b| {
                Box::pin(b.burn_down_traced(n, c))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_untraced", n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_layered") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_layered", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_layered", n, c, Load::Layered))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_unlayered", n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_progress") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_progress", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_progress", n, c, Load::Progress))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_unreported", n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_batched") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_batched", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_batched", n, c, Load::Batched))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down_cpu("burn_down_unbatched", n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_history") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_history", "jobs/s", &|b| {
                Box::pin(b.burn_down_history(n, c))
            }),
            ("burn_down", "jobs/s", &|b| {
                Box::pin(b.burn_down(n, c, Load::Noop))
            }),
        )
        .await?;
    }
    if b.wants("burn_down_global_limit") {
        let (n, c) = (b.args.jobs, b.args.concurrency);
        b.measure_pair(
            ("burn_down_global_limit", "jobs/s", &|b| {
                Box::pin(b.burn_down_global_limit(n, c))
            }),
            ("raw_burn_down", "jobs/s", &|b| Box::pin(b.raw_burn_down(n))),
        )
        .await?;
    }
    if b.wants("latency") {
        b.latency().await?;
    }
    if b.wants("backlog_start") {
        b.measure("backlog_start_first_2s", "jobs/s", |b| {
            Box::pin(b.backlog_start(20_000, 16))
        })
        .await?;
    }
    if b.args.names("profile") {
        // Each burn-down alone (no pair), for a profile of the server (bench_profile.rs).
        let n = b.args.jobs;
        b.measure("burn_down_c16", "jobs/s", |b| {
            Box::pin(b.burn_down(n, 16, Load::Noop))
        })
        .await?;
        b.measure("min_burn_down", "jobs/s", |b| Box::pin(b.min_burn_down(n)))
            .await?;
    }
    if b.wants("slow_jobs") {
        let n = b.args.slow_jobs;
        b.measure("slow_jobs", "jobs/s", |b| {
            Box::pin(b.burn_down(n, 256, Load::Sleep))
        })
        .await?;
    }
    for (name, value, unit) in &b.results {
        println!("{name} {value:.1} {unit}");
    }
    let side = FIGURES.take();
    for line in figures::side_lines(&side) {
        println!("{line}");
    }
    for (name, baseline, ratio) in &b.ratios {
        let of = match *baseline {
            "raw_copy_bulk" => "raw_copy",
            "raw_one_per_round_trip" => "one_per_round_trip",
            b if b.starts_with("raw_") => "raw",
            "min_copy_bulk" => "min_copy",
            b if b.starts_with("min_") => "min",
            b => b,
        };
        println!("{name}_ratio {ratio:.2} of_{of}");
        // What the span, or the layer, costs in the worker's CPU: the runs' CPU per job
        // without it over theirs with it (1.0: nothing).
        for (with, without) in [
            ("traced", "untraced"),
            ("layered", "unlayered"),
            ("progress", "unreported"),
            ("batched", "unbatched"),
        ] {
            if *name != format!("burn_down_{with}") {
                continue;
            }
            if let (Some(on), Some(off)) = (
                side_median(&side, &format!("burn_down_{with}_cpu_us_per_job")),
                side_median(&side, &format!("burn_down_{without}_cpu_us_per_job")),
            ) {
                println!("burn_down_{with}_cpu_ratio {:.2} of_{without}", off / on);
            }
        }
        if *name == "failure_storm" {
            println!("{}", storm_runs_line(*ratio));
        }
        if name.starts_with("burn_down") && *baseline == "min_burn_down" {
            for line in figures::of_min_lines(&side, name) {
                println!("{line}");
            }
        }
        if *name == "burn_down" && *baseline == "raw_burn_down" {
            // The server's CPU per job, the raw baseline's over sk's (1.0: sk costs the
            // server no more than the bare claim and delete).
            if let (Some(sk), Some(raw)) = (
                side_median(&side, "burn_down_server_cpu_us_per_job"),
                side_median(&side, "raw_burn_down_server_cpu_us_per_job"),
            ) {
                println!("burn_down_server_cpu_ratio {:.2} of_raw", raw / sk);
            }
        }
    }
    Ok(())
}
