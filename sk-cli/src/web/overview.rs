//! The overview: the last hour's runs with a chart, jobs by queue, paused queues, workers.

use axum::extract::State;
use chrono::{DateTime, Duration, DurationRound as _, Utc};
use maud::{html, Markup};
use sk_runtime::{CountBy, Per, QueueState};

use super::layout::{page, segment, workers_table};
use super::{Page, Shared};
use crate::output::time;

pub(super) async fn overview(State(app): Shared) -> Page {
    let client = &app.client;
    let now = Utc::now();
    let counts = client.count_by(CountBy::Queue).await?;
    let queues = client.queues().await?;
    let workers = client.workers().await?;
    let hour = client
        .throughput(now - Duration::hours(1), Per::Minute, None)
        .await?;
    let succeeded: i64 = hour.iter().map(|r| r.processed).sum();
    let failed: i64 = hour.iter().map(|r| r.failed).sum();
    let rate = if succeeded + failed > 0 {
        failed as f64 * 100.0 / (succeeded + failed) as f64
    } else {
        0.0
    };
    let paused: Vec<&QueueState> = queues.iter().filter(|q| q.paused_at.is_some()).collect();
    let is_paused = |name: &str| paused.iter().any(|q| q.name == name);
    let body = html! {
        section {
            h2 { "Last hour" }
            p.figures {
                span #succeeded { (succeeded) } " succeeded · "
                span #failed { (failed) } " failed · "
                span #failure-rate { (format!("{rate:.1}")) } "% failure rate"
            }
            (chart(&hour, now))
        }
        section {
            h2 { "Jobs by queue" }
            @if counts.is_empty() {
                p { "No jobs." }
            } @else {
                div.scroll { table #counts {
                    tr { th { "queue" } th { "available" } th { "scheduled" } th { "pending" }
                         th { "retrying" } th { "running" } th { "fatal" } th { "cancelled" } }
                    @for c in &counts {
                        @let name = c.key.clone().unwrap_or_default();
                        @let link = |state: &str, n: i64| html! {
                            td data-state=(state) {
                                a href=(format!("/jobs?queue={}&state={state}", segment(&name))) { (n) }
                            }
                        };
                        tr data-queue=(name) {
                            td {
                                (name)
                                @if is_paused(&name) { " " span.tag { "paused" } }
                            }
                            (link("waiting", c.available))
                            td data-state="scheduled" { (c.scheduled) }
                            (link("pending", c.pending))
                            td data-state="retrying" { (c.retrying) }
                            (link("running", c.running))
                            (link("fatal", c.fatal))
                            (link("cancelled", c.cancelled))
                        }
                    }
                } }
            }
        }
        section {
            h2 { "Paused queues" }
            @if paused.is_empty() {
                p #paused { "None." }
            } @else {
                ul #paused {
                    @for q in &paused { li { (q.name) " since " (time(q.paused_at)) } }
                }
            }
        }
        section { h2 { "Workers" } (workers_table(&workers)) }
    };
    Ok(page("Overview", "/", body))
}

/// Runs per minute over the last hour as bars, failed ones stacked on the succeeded.
fn chart(rows: &[sk_runtime::Throughput], now: DateTime<Utc>) -> Markup {
    const WIDTH: f64 = 600.0;
    const HEIGHT: f64 = 120.0;
    let start = now
        .duration_trunc(Duration::minutes(1))
        .unwrap_or(now)
        .checked_sub_signed(Duration::minutes(59))
        .unwrap_or(now);
    let mut minutes = [(0i64, 0i64); 60];
    for r in rows {
        let i = (r.at - start).num_minutes();
        if let Some(slot) = usize::try_from(i).ok().and_then(|i| minutes.get_mut(i)) {
            slot.0 += r.processed;
            slot.1 += r.failed;
        }
    }
    let top = minutes.iter().map(|(s, f)| s + f).max().unwrap_or(0).max(1);
    let bar = WIDTH / 60.0;
    let tenths = |v: f64| format!("{v:.1}");
    let label_y = HEIGHT + 12.0;
    html! {
        svg.chart viewBox=(format!("0 0 {WIDTH} {}", HEIGHT + 14.0)) role="img"
            aria-label="runs per minute, last hour" {
            @for (i, (ok, failed)) in minutes.iter().enumerate() {
                @let x = i as f64 * bar;
                @let h_ok = *ok as f64 / top as f64 * HEIGHT;
                @let h_failed = *failed as f64 / top as f64 * HEIGHT;
                @if *ok > 0 {
                    rect.ok x=(tenths(x)) y=(tenths(HEIGHT - h_ok)) width=(tenths(bar - 1.0))
                        height=(tenths(h_ok)) { title { (ok) " succeeded" } }
                }
                @if *failed > 0 {
                    rect.failed x=(tenths(x)) y=(tenths(HEIGHT - h_ok - h_failed))
                        width=(tenths(bar - 1.0)) height=(tenths(h_failed)) {
                        title { (failed) " failed" }
                    }
                }
            }
            line x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) class="axis" {}
            text x="0" y=(label_y) { "-60 min" }
            text x=(WIDTH) y=(label_y) text-anchor="end" { "now · peak " (top) "/min" }
        }
    }
}
