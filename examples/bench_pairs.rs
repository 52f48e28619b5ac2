//! The SQLite and MySQL benches' runs: each sk measure in alternation with its baseline
//! (sk, baseline, sk, …), each run on a fresh database, and the lines they print.

use std::future::Future;
use std::pin::Pin;

use super::figures::{of_min_lines, FIGURES};
use super::{Args, BoxError};

/// One run of a measure on a fresh database's pool: its rate.
pub(super) type Run<P> = fn(P, &Args) -> Pin<Box<dyn Future<Output = Result<f64, BoxError>>>>;

/// An sk measure and its baseline: (name, unit, run, baseline's name, baseline's run).
pub(super) type Pair<P> = (&'static str, &'static str, Run<P>, &'static str, Run<P>);

/// Runs each pair `--repeat` times in alternation, each run through `on_fresh` (a fresh
/// database for it), and returns the lines: each side's median and the median of the
/// pairs' ratios, `of_raw` for a raw baseline, `of_min` for the minimal table's (with its
/// CPU and log ratios), and what the pair's own name says otherwise.
pub(super) async fn run<P, F, Fut>(
    pairs: &[Pair<P>],
    args: &Args,
    on_fresh: F,
) -> Result<Vec<String>, BoxError>
where
    F: Fn(Run<P>, Args) -> Fut,
    Fut: Future<Output = Result<f64, BoxError>>,
{
    let mut lines = Vec::new();
    for &(name, unit, sk, baseline, base) in pairs {
        if !args.wants(name) {
            continue;
        }
        let mut runs = Vec::new();
        for i in 0..args.repeat {
            FIGURES.start(name);
            let a = on_fresh(sk, args.clone()).await?;
            FIGURES.start(baseline);
            let b = on_fresh(base, args.clone()).await?;
            eprintln!(
                "bench: {name} run {} = {a:.1}, {baseline} = {b:.1} {unit}, ratio {:.2}",
                i + 1,
                a / b
            );
            runs.push((a, b, a / b));
        }
        let median = |f: fn(&(f64, f64, f64)) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        lines.push(format!("{name} {:.1} {unit}", median(|r| r.0)));
        lines.push(format!("{baseline} {:.1} {unit}", median(|r| r.1)));
        let of = match baseline {
            "raw_insert_bulk_queue_table" => "raw_on_queue_table",
            raw if raw.starts_with("raw_") => "raw",
            min if min.starts_with("min_") => "min",
            other => other,
        };
        lines.push(format!("{name}_ratio {:.2} of_{of}", median(|r| r.2)));
        if baseline == "min_burn_down" {
            lines.extend(of_min_lines(&FIGURES.snapshot(), name));
        }
        if name == "failure_storm" {
            lines.push(super::storm_runs_line(median(|r| r.2)));
        }
    }
    Ok(lines)
}

/// The pickup latency lines of `samples` (ms).
pub(super) fn latency_lines(mut samples: Vec<f64>) -> Vec<String> {
    samples.sort_by(f64::total_cmp);
    let pick = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]
        .into_iter()
        .map(|(k, p)| format!("pickup_latency_{k} {:.2} ms", pick(p)))
        .collect()
}
