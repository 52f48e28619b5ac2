//! The dashboard's charts, drawn as SVG on the server: runs per minute with axes and a
//! legend, the width of their card; and an error group's sparkline.

use chrono::{DateTime, Duration, DurationRound as _, Utc};
use maud::{html, Markup};

/// Runs per minute over the last hour as bars, failed ones stacked on the succeeded,
/// with a y axis (0, half and the peak), an x axis (minutes ago) and a legend.
pub(super) fn runs_per_minute(rows: &[sk_runtime::Throughput], now: DateTime<Utc>) -> Markup {
    const WIDTH: f64 = 1000.0;
    const HEIGHT: f64 = 140.0;
    const LEFT: f64 = 40.0;
    const TOP: f64 = 18.0;
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
    let plot = WIDTH - LEFT;
    let bar = plot / 60.0;
    let tenths = |v: f64| format!("{v:.1}");
    let y = |v: f64| TOP + HEIGHT - v / top as f64 * HEIGHT;
    let base = TOP + HEIGHT;
    html! {
        svg.chart viewBox=(format!("0 0 {WIDTH} {}", base + 18.0)) role="img"
            aria-label="runs per minute, last hour" {
            rect.ok x=(LEFT) y="2" width="10" height="10" {}
            text x=(LEFT + 14.0) y="11" { "succeeded" }
            rect.failed x=(LEFT + 90.0) y="2" width="10" height="10" {}
            text x=(LEFT + 104.0) y="11" { "failed" }
            @for (label, v) in [(top.to_string(), top as f64), ((top / 2).to_string(), (top / 2) as f64), ("0".to_owned(), 0.0)] {
                line.grid x1=(LEFT) y1=(tenths(y(v))) x2=(WIDTH) y2=(tenths(y(v))) {}
                text x=(LEFT - 4.0) y=(tenths(y(v) + 3.0)) text-anchor="end" { (label) }
            }
            @for (i, (ok, failed)) in minutes.iter().enumerate() {
                @let x = LEFT + i as f64 * bar;
                @let h_ok = *ok as f64 / top as f64 * HEIGHT;
                @let h_failed = *failed as f64 / top as f64 * HEIGHT;
                @if *ok > 0 {
                    rect.ok x=(tenths(x)) y=(tenths(base - h_ok)) width=(tenths(bar - 1.0))
                        height=(tenths(h_ok)) { title { (ok) " succeeded" } }
                }
                @if *failed > 0 {
                    rect.failed x=(tenths(x)) y=(tenths(base - h_ok - h_failed))
                        width=(tenths(bar - 1.0)) height=(tenths(h_failed)) {
                        title { (failed) " failed" }
                    }
                }
            }
            line.axis x1=(LEFT) y1=(base) x2=(WIDTH) y2=(base) {}
            @for m in [60, 45, 30, 15] {
                text x=(tenths(LEFT + (60 - m) as f64 * bar)) y=(base + 14.0) { "-" (m) " min" }
            }
            text x=(WIDTH) y=(base + 14.0) text-anchor="end" { "now (runs per minute)" }
        }
    }
}

/// An error group's jobs per hour over the 24 hours to `now`, as small bars.
pub(super) fn sparkline(hourly: &[(DateTime<Utc>, i64)], now: DateTime<Utc>) -> Markup {
    let start = now.duration_trunc(Duration::hours(1)).unwrap_or(now) - Duration::hours(23);
    let mut hours = [0i64; 24];
    for (at, n) in hourly {
        if let Some(slot) = usize::try_from((*at - start).num_hours())
            .ok()
            .and_then(|i| hours.get_mut(i))
        {
            *slot += n;
        }
    }
    let top = hours.iter().copied().max().unwrap_or(0).max(1);
    html! {
        svg.spark viewBox="0 0 96 20" role="img" aria-label="jobs per hour, last 24 hours" {
            @for (i, n) in hours.iter().enumerate() {
                @if *n > 0 {
                    @let h = (*n as f64 / top as f64 * 18.0).max(1.0);
                    rect x=(i * 4) y=(format!("{:.1}", 20.0 - h)) width="3" height=(format!("{h:.1}")) {
                        title { (n) }
                    }
                }
            }
        }
    }
}
