//! The commands on a queue's limits: `sk limit` sets them, `sk tenants` shows what a
//! queue's limits per tenant leave each tenant; and the limits' cells in tables.

use std::io::Write;

use sk_runtime::Client;

use crate::output::{cells, print_json, print_table, rate_cell, say, table};
use crate::{fail, Failure};

/// A queue's fairness and limits per tenant as `sk status` and the dashboard show them:
/// "fair", "2", "10/1s", "fair, 2, 10/1s" ("" for none).
pub(crate) fn per_tenant_cell(queue: &sk_runtime::QueueState) -> String {
    let fair = queue.fair_since.map(|_| "fair".to_owned());
    let running = queue.tenant_limit.map(|n| n.to_string());
    let rate = queue.tenant_rate_limit.map(|r| r.to_string());
    fair.into_iter()
        .chain(running)
        .chain(rate)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A limit of running jobs as given (`what`: "limit"): a number from 1, or `none`.
fn running_limit(what: &str, text: Option<&str>) -> Result<Option<Option<u32>>, Failure> {
    text.map(|text| match text {
        "none" => Ok(None),
        n => n
            .parse::<u32>()
            .map(Some)
            .map_err(|_| fail(format!("{what} {n:?}: a number from 1, or none"), 1)),
    })
    .transpose()
}

/// The limits `sk limit` changes, as given (each `None` when not).
pub(crate) struct Limits<'a> {
    pub(crate) running: Option<&'a str>,
    pub(crate) per_tenant: Option<&'a str>,
    pub(crate) rate: Option<&'a str>,
    pub(crate) per_tenant_rate: Option<&'a str>,
    pub(crate) fair: Option<&'a str>,
}

/// A rate limit as given: `100/1m`, or `none`.
fn rate_limit(text: Option<&str>) -> Result<Option<Option<sk_runtime::RateLimit>>, Failure> {
    Ok(text
        .map(|text| match text {
            "none" => Ok(None),
            r => r.parse::<sk_runtime::RateLimit>().map(Some),
        })
        .transpose()?)
}

/// Fair claims as given: `on` or `off`.
fn switch(what: &str, text: Option<&str>) -> Result<Option<bool>, Failure> {
    text.map(|text| match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(fail(format!("{what} {other:?}: on or off"), 1)),
    })
    .transpose()
}

/// `sk limit`: sets or lifts a queue's concurrency limit, each of its tenants', its
/// rate limit, each of its tenants' rate limit, its fair claims, or several.
pub(crate) async fn limit(
    client: &Client,
    queue: &str,
    change: &Limits<'_>,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let limit = running_limit("limit", change.running)?;
    let per_tenant = running_limit("--per-tenant", change.per_tenant)?;
    let rate = rate_limit(change.rate)?;
    let tenant_rate = rate_limit(change.per_tenant_rate)?;
    let fair = switch("--fair", change.fair)?;
    let mut said = Vec::new();
    let mut record = serde_json::json!({ "queue": queue });
    let mut tell = |key: &str, value: serde_json::Value, text: String| {
        record[key] = value;
        said.push(text);
    };
    let starts = |r: &sk_runtime::RateLimit, of: &str| {
        let window = humantime::format_duration(r.window);
        format!(
            "at most {} starts{of} in any {window} across all workers",
            r.count
        )
    };
    if let Some(limit) = limit {
        client.set_global_limit(queue, limit).await?;
        let text = limit.map_or("no limit across workers".to_owned(), |n| {
            format!("at most {n} at once across all workers")
        });
        tell("global_limit", serde_json::json!(limit), text);
    }
    if let Some(limit) = per_tenant {
        client.set_tenant_limit(queue, limit).await?;
        let text = limit.map_or("no limit per tenant".to_owned(), |n| {
            format!("at most {n} of each tenant at once across all workers")
        });
        tell("tenant_limit", serde_json::json!(limit), text);
    }
    if let Some(rate) = rate {
        client.set_rate_limit(queue, rate).await?;
        let text = rate.map_or("no rate limit".to_owned(), |r| starts(&r, ""));
        tell("rate_limit", serde_json::json!(rate), text);
    }
    if let Some(rate) = tenant_rate {
        client.set_tenant_rate_limit(queue, rate).await?;
        let text = rate.map_or("no rate limit per tenant".to_owned(), |r| {
            starts(&r, " of each tenant")
        });
        tell("tenant_rate_limit", serde_json::json!(rate), text);
    }
    if let Some(fair) = fair {
        client.set_fair(queue, fair).await?;
        let text = if fair {
            "claimed fairly across its tenants"
        } else {
            "claimed in the queue's order"
        };
        tell("fair", serde_json::json!(fair), text.to_owned());
    }
    say(out, json, &record, || {
        format!("{queue}: {}", said.join("; "))
    })
}

/// Of each queue with a limit per tenant, how many tenants it holds back with jobs
/// waiting.
pub(crate) async fn held_tenants(
    client: &Client,
    queues: &[sk_runtime::QueueState],
) -> Result<std::collections::BTreeMap<String, usize>, Failure> {
    let mut held = std::collections::BTreeMap::new();
    for q in queues {
        if q.tenant_limit.is_some() || q.tenant_rate_limit.is_some() {
            let tenants = client.tenants(&q.name).await?;
            let n = tenants.iter().filter(|t| waiting(t)).count();
            held.insert(q.name.clone(), n);
        }
    }
    Ok(held)
}

/// Whether a limit per tenant holds `tenant` back with jobs waiting.
pub(crate) fn waiting(tenant: &sk_runtime::TenantState) -> bool {
    tenant.held_by.is_some() && tenant.available > 0
}

/// What holds a tenant back, as `sk tenants` and the dashboard show it.
pub(crate) fn hold_cell(tenant: &sk_runtime::TenantState) -> String {
    match tenant.held_by {
        Some(sk_runtime::TenantHold::RunningLimit) => "its limit of running jobs".to_owned(),
        Some(sk_runtime::TenantHold::RateLimit) => "its rate".to_owned(),
        _ => String::new(),
    }
}

/// `sk tenants`: a queue's tenants, their jobs, their starts against the queue's rate per
/// tenant and which limit holds each back now (`held`: only those held with jobs
/// waiting).
pub(crate) async fn tenants(
    client: &Client,
    queue: &str,
    held: bool,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let mut tenants = client.tenants(queue).await?;
    if held {
        tenants.retain(waiting);
    }
    if json {
        return print_json(out, &tenants);
    }
    let mut table = table(&["tenant", "available", "running", "rate", "held by"]);
    for t in &tenants {
        table.add_row(cells([
            t.tenant.clone(),
            t.available.to_string(),
            t.running.to_string(),
            t.rate.as_ref().map_or_else(String::new, rate_cell),
            hold_cell(t),
        ]));
    }
    let none = if held {
        "no tenant held back"
    } else {
        "no tenants"
    };
    print_table(out, table, tenants.is_empty(), none)
}
