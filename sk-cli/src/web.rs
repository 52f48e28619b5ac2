//! `sk web`: the dashboard. Server-rendered pages (no front-end build), each a plain HTML
//! document with a little script that refreshes its `<main>` every few seconds.
//!
//! Like the rest of the command it reads and acts only through `sk_runtime::Client`.
//! Safe by default: `sk web` binds to loopback; bound elsewhere it needs a token (basic
//! auth, any user name, or `Authorization: Bearer`); `--read-only` refuses every action;
//! every action is a POST carrying the server's CSRF token, and a cross-site request is
//! refused whatever it carries.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use chrono::{DateTime, Duration, DurationRound as _, Utc};
use sk_runtime::{
    Client, CountBy, JobFilter, JobPage, JobRecord, JobStatus, Per, QueueState, WorkerInfo,
};
use uuid::Uuid;

use crate::output::time;

mod hosts;

/// How the dashboard guards itself.
#[derive(Debug, Clone, Default)]
pub struct WebOptions {
    /// Show everything, change nothing: no action buttons, and every POST refused.
    pub read_only: bool,
    /// Required of every request when set: the password of basic auth (any user name),
    /// or `Authorization: Bearer TOKEN`.
    pub token: Option<String>,
    /// Host names the dashboard answers to besides the address it is bound to,
    /// `localhost`, `127.0.0.1` and `[::1]` (`sk web --allow-host`): a reverse proxy's
    /// name, say. A name without a port matches on any port; `name:port` on that port.
    pub allow_hosts: Vec<String>,
}

struct App {
    client: Client,
    options: WebOptions,
    /// The address it is bound to: a request's `Host` must name it (or a name allowed).
    bound: SocketAddr,
    /// Every form carries it; a POST without it is refused (CSRF).
    csrf: String,
}

type Shared = State<Arc<App>>;

/// The dashboard's routes over `client`, served at `bound`.
pub fn router(client: Client, options: WebOptions, bound: SocketAddr) -> Router {
    let csrf = format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
    let app = Arc::new(App {
        client,
        options,
        bound,
        csrf,
    });
    Router::new()
        .route("/", get(overview))
        .route("/queues", get(queues))
        .route("/queues/{name}/{action}", post(queue_action))
        .route("/jobs", get(jobs))
        .route("/jobs/{id}", get(job))
        .route("/jobs/{id}/{action}", post(job_action))
        .route("/errors", get(errors))
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Serves the dashboard on `listener` until the process ends.
///
/// # Errors
/// The listener fails.
pub async fn serve(
    client: Client,
    listener: tokio::net::TcpListener,
    options: WebOptions,
) -> std::io::Result<()> {
    let bound = listener.local_addr()?;
    axum::serve(listener, router(client, options, bound)).await
}

/// An error page: the database failed, or the request was wrong.
struct Failure(StatusCode, String);

impl From<sk_runtime::Error> for Failure {
    /// Bad input is the request's fault (400, sk's plain message); a missing job a 404;
    /// the rest the server's.
    fn from(e: sk_runtime::Error) -> Self {
        let status = match &e {
            sk_runtime::Error::Invalid { .. } => StatusCode::BAD_REQUEST,
            sk_runtime::Error::JobNotFound(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = e.to_string();
        let first = message.lines().next().unwrap_or_default().to_owned();
        Failure(status, first)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = page(
            "Error",
            "",
            &format!("<p class=\"error\">{}</p>", esc(&self.1)),
        );
        (self.0, Html(body)).into_response()
    }
}

type Page = Result<Html<String>, Failure>;

/// Checks the token (when one is set) of every request, and the CSRF token and the
/// read-only mode of every POST.
async fn guard(State(app): Shared, request: Request, next: Next) -> Response {
    let mut response = match admit(&app, &request) {
        Some(refused) => refused,
        None => next.run(request).await,
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, policy().clone());
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// The refusal of a request the guard turns away, if it does.
fn admit(app: &App, request: &Request) -> Option<Response> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if let Err(reason) = hosts::check(host, app.bound, &app.options.allow_hosts) {
        // 421 Misdirected Request: a page of another site whose name resolves here
        // (DNS rebinding) reads nothing and acts on nothing.
        return Some(
            (
                StatusCode::MISDIRECTED_REQUEST,
                format!("sk web: {reason}\n"),
            )
                .into_response(),
        );
    }
    if let Some(token) = &app.options.token {
        if !authorized(request.headers(), token) {
            let mut response =
                (StatusCode::UNAUTHORIZED, "sk web: a token is required\n").into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"sk\""),
            );
            return Some(response);
        }
    }
    if request.method() == axum::http::Method::POST {
        if app.options.read_only {
            return Some(
                (
                    StatusCode::FORBIDDEN,
                    "sk web: read-only: this dashboard takes no action\n",
                )
                    .into_response(),
            );
        }
        let cross_site = request
            .headers()
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes() == b"cross-site");
        if cross_site {
            return Some((StatusCode::FORBIDDEN, "sk web: a cross-site request\n").into_response());
        }
        if let Err(reason) = hosts::same_origin(request.headers(), host) {
            return Some((StatusCode::FORBIDDEN, format!("sk web: {reason}\n")).into_response());
        }
    }
    None
}

/// The Content-Security-Policy of every response: the page's own style and script (by
/// their hashes) and nothing else, so text that escaped [`esc`] still could not run a
/// script or load anything; no framing (the action buttons cannot be clickjacked); forms
/// post only here.
fn policy() -> &'static HeaderValue {
    static POLICY: std::sync::OnceLock<HeaderValue> = std::sync::OnceLock::new();
    POLICY.get_or_init(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let hash = |text: &str| base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(text));
        let value = format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            hash(SCRIPT),
            hash(STYLE)
        );
        HeaderValue::from_str(&value).expect("base64 and ASCII make a header value")
    })
}

/// Whether the request carries `token`: basic auth's password or a bearer token.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    if let Some(bearer) = value.strip_prefix("Bearer ") {
        return same(bearer.trim().as_bytes(), token.as_bytes());
    }
    let Some(basic) = value.strip_prefix("Basic ") else {
        return false;
    };
    let Ok(decoded) =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, basic.trim())
    else {
        return false;
    };
    match decoded.iter().position(|&b| b == b':') {
        Some(colon) => same(&decoded[colon + 1..], token.as_bytes()),
        None => false,
    }
}

/// Compares in a time that does not depend on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(serde::Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
}

/// A form without the CSRF token, or no form at all, is refused alike.
fn check_csrf(app: &App, form: Result<Form<ActionForm>, FormRejection>) -> Result<(), Failure> {
    if form.is_ok_and(|Form(form)| same(form.csrf.as_bytes(), app.csrf.as_bytes())) {
        Ok(())
    } else {
        Err(Failure(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale: reload the page".to_owned(),
        ))
    }
}

async fn overview(State(app): Shared) -> Page {
    let client = &app.client;
    let now = Utc::now();
    let counts = client.count_by(CountBy::Queue).await?;
    let queues = client.queues().await?;
    let workers = client.workers().await?;
    let hour = client
        .throughput(now - Duration::hours(1), Per::Minute, None)
        .await?;
    let mut body = String::new();
    let succeeded: i64 = hour.iter().map(|r| r.processed).sum();
    let failed: i64 = hour.iter().map(|r| r.failed).sum();
    let rate = if succeeded + failed > 0 {
        failed as f64 * 100.0 / (succeeded + failed) as f64
    } else {
        0.0
    };
    let _ = write!(
        body,
        "<section><h2>Last hour</h2><p class=\"figures\"><span id=\"succeeded\">{succeeded}</span> succeeded · \
         <span id=\"failed\">{failed}</span> failed · <span id=\"failure-rate\">{rate:.1}</span>% failure rate</p>{}</section>",
        chart(&hour, now)
    );
    body.push_str("<section><h2>Jobs by queue</h2>");
    if counts.is_empty() {
        body.push_str("<p>No jobs.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"counts\"><tr><th>queue</th><th>available</th><th>scheduled</th>\
             <th>pending</th><th>retrying</th><th>running</th><th>fatal</th><th>cancelled</th></tr>",
        );
        for c in &counts {
            let name = c.key.clone().unwrap_or_default();
            let link = |state: &str, n: i64| {
                format!(
                    "<td data-state=\"{state}\"><a href=\"/jobs?queue={}&amp;state={state}\">{n}</a></td>",
                    url(&name)
                )
            };
            let _ = write!(
                body,
                "<tr data-queue=\"{}\"><td>{}{}</td>{}{}{}{}{}{}{}</tr>",
                esc(&name),
                esc(&name),
                if queues
                    .iter()
                    .any(|q| q.name == name && q.paused_at.is_some())
                {
                    " <span class=\"tag\">paused</span>"
                } else {
                    ""
                },
                link("waiting", c.available),
                format_args!("<td data-state=\"scheduled\">{}</td>", c.scheduled),
                link("pending", c.pending),
                format_args!("<td data-state=\"retrying\">{}</td>", c.retrying),
                link("running", c.running),
                link("fatal", c.fatal),
                link("cancelled", c.cancelled),
            );
        }
        body.push_str("</table></div>");
    }
    body.push_str("</section>");
    let paused: Vec<&QueueState> = queues.iter().filter(|q| q.paused_at.is_some()).collect();
    body.push_str("<section><h2>Paused queues</h2>");
    if paused.is_empty() {
        body.push_str("<p id=\"paused\">None.</p>");
    } else {
        body.push_str("<ul id=\"paused\">");
        for q in paused {
            let _ = write!(
                body,
                "<li>{} since {}</li>",
                esc(&q.name),
                time(q.paused_at)
            );
        }
        body.push_str("</ul>");
    }
    body.push_str("</section>");
    let _ = write!(
        body,
        "<section><h2>Workers</h2>{}</section>",
        workers_table(&workers)
    );
    Ok(Html(page("Overview", "/", &body)))
}

/// Runs per minute over the last hour as bars, failed ones stacked on the succeeded.
fn chart(rows: &[sk_runtime::Throughput], now: DateTime<Utc>) -> String {
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
    let (width, height) = (600.0, 120.0);
    let bar = width / 60.0;
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {width} {}\" role=\"img\" aria-label=\"runs per minute, last hour\">",
        height + 14.0
    );
    for (i, (ok, failed)) in minutes.iter().enumerate() {
        let x = i as f64 * bar;
        let h_ok = *ok as f64 / top as f64 * height;
        let h_failed = *failed as f64 / top as f64 * height;
        if *ok > 0 {
            let _ = write!(
                svg,
                "<rect class=\"ok\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h_ok:.1}\"><title>{ok} succeeded</title></rect>",
                height - h_ok,
                bar - 1.0
            );
        }
        if *failed > 0 {
            let _ = write!(
                svg,
                "<rect class=\"failed\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h_failed:.1}\"><title>{failed} failed</title></rect>",
                height - h_ok - h_failed,
                bar - 1.0
            );
        }
    }
    let _ = write!(
        svg,
        "<line x1=\"0\" y1=\"{height}\" x2=\"{width}\" y2=\"{height}\" class=\"axis\"/>\
         <text x=\"0\" y=\"{y}\">-60 min</text><text x=\"{width}\" y=\"{y}\" text-anchor=\"end\">now · peak {top}/min</text></svg>",
        y = height + 12.0
    );
    svg
}

async fn queues(State(app): Shared) -> Page {
    let queues = app.client.queues().await?;
    let mut body = String::from("<section><h2>Queues</h2>");
    if queues.is_empty() {
        body.push_str("<p>No queues.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"queues\"><tr><th>queue</th><th>available</th><th>scheduled</th>\
             <th>pending</th><th>running</th><th>global limit</th><th>state</th><th></th></tr>",
        );
        for q in &queues {
            let (state, action) = match q.paused_at {
                Some(at) => (format!("paused since {}", time(Some(at))), "resume"),
                None => ("running".to_owned(), "pause"),
            };
            let button = if app.options.read_only {
                String::new()
            } else {
                form(
                    &app,
                    &format!("/queues/{}/{action}", url(&q.name)),
                    action,
                    false,
                )
            };
            let _ = write!(
                body,
                "<tr data-queue=\"{name}\"><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td class=\"state\">{state}</td><td>{button}</td></tr>",
                q.available,
                q.scheduled,
                q.pending,
                q.running,
                q.global_limit.map_or_else(|| "none".to_owned(), |n| n.to_string()),
                name = esc(&q.name),
            );
        }
        body.push_str("</table></div>");
    }
    body.push_str("</section>");
    Ok(Html(page("Queues", "/queues", &body)))
}

async fn queue_action(
    State(app): Shared,
    Path((name, action)): Path<(String, String)>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, Failure> {
    check_csrf(&app, form)?;
    match action.as_str() {
        "pause" => app.client.pause(&name).await?,
        "resume" => app.client.resume(&name).await?,
        _ => return Err(not_found(format!("no action {action:?} on a queue"))),
    };
    Ok(Redirect::to("/queues"))
}

#[derive(serde::Deserialize, Default)]
struct JobsQuery {
    queue: Option<String>,
    #[serde(rename = "type")]
    task_type: Option<String>,
    state: Option<String>,
    tenant: Option<String>,
    after: Option<String>,
}

fn status_named(name: &str) -> Option<JobStatus> {
    Some(match name {
        "waiting" => JobStatus::Unprocessed,
        "pending" => JobStatus::Pending,
        "running" => JobStatus::Processing,
        "processed" => JobStatus::Processed,
        "fatal" => JobStatus::Fatal,
        "cancelled" => JobStatus::Cancelled,
        _ => return None,
    })
}

fn status_name(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Unprocessed => "waiting",
        JobStatus::Pending => "pending",
        JobStatus::Processing => "running",
        JobStatus::Processed => "processed",
        JobStatus::Fatal => "fatal",
        JobStatus::Cancelled => "cancelled",
        _ => "other",
    }
}

async fn jobs(State(app): Shared, Query(query): Query<JobsQuery>) -> Page {
    let given = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
    let mut filter = JobFilter::new();
    if let Some(q) = given(&query.queue) {
        filter = filter.queue(q);
    }
    if let Some(t) = given(&query.task_type) {
        filter = filter.task_type(t);
    }
    if let Some(t) = given(&query.tenant) {
        filter = filter.tenant(t);
    }
    if let Some(s) = given(&query.state) {
        let status = status_named(&s).ok_or_else(|| {
            bad(format!(
                "no state {s:?}: waiting, running, processed, fatal or cancelled"
            ))
        })?;
        filter = filter.status(status);
    }
    let after = match given(&query.after) {
        Some(a) => Some(
            a.parse::<Uuid>()
                .map_err(|_| bad(format!("after={a:?} is not a job id")))?,
        ),
        None => None,
    };
    let JobPage { jobs, next, .. } = app.client.jobs(&filter, after, 50).await?;
    let value = |v: &Option<String>| esc(v.as_deref().unwrap_or_default());
    let mut body = format!(
        "<section><h2>Jobs</h2><form class=\"filters\" method=\"get\" action=\"/jobs\">\
         <input name=\"queue\" placeholder=\"queue\" value=\"{}\">\
         <input name=\"type\" placeholder=\"task type\" value=\"{}\">\
         <input name=\"tenant\" placeholder=\"tenant\" value=\"{}\"><select name=\"state\"><option value=\"\">any state</option>",
        value(&query.queue),
        value(&query.task_type),
        value(&query.tenant)
    );
    for s in ["waiting", "running", "processed", "fatal", "cancelled"] {
        let selected = if query.state.as_deref() == Some(s) {
            " selected"
        } else {
            ""
        };
        let _ = write!(body, "<option{selected}>{s}</option>");
    }
    body.push_str("</select><button>Filter</button></form>");
    if jobs.is_empty() {
        body.push_str("<p>No jobs.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"jobs\"><tr><th>id</th><th>type</th><th>queue</th><th>state</th>\
             <th>attempt</th><th>posted</th><th>last error</th></tr>",
        );
        for j in &jobs {
            let _ = write!(
                body,
                "<tr><td><a class=\"id\" href=\"/jobs/{id}\">{id}</a></td><td>{}</td><td>{}</td>\
                 <td class=\"state {s}\">{s}</td><td>{}</td><td>{}</td><td class=\"message\">{}</td></tr>",
                esc(&j.task_type),
                esc(&j.queue),
                j.attempt.map_or_else(String::new, |a| a.to_string()),
                time(Some(j.posted_at)),
                esc(j.last_error_message.as_deref().unwrap_or_default()),
                id = j.id,
                s = status_name(j.status()),
            );
        }
        body.push_str("</table></div>");
    }
    if let Some(next) = next {
        let mut link = format!("/jobs?after={next}");
        for (k, v) in [
            ("queue", &query.queue),
            ("type", &query.task_type),
            ("tenant", &query.tenant),
            ("state", &query.state),
        ] {
            if let Some(v) = given(v) {
                let _ = write!(link, "&amp;{k}={}", url(&v));
            }
        }
        let _ = write!(
            body,
            "<p><a id=\"next\" href=\"{link}\">Older jobs →</a></p>"
        );
    }
    body.push_str("</section>");
    Ok(Html(page("Jobs", "/jobs", &body)))
}

async fn job(State(app): Shared, Path(id): Path<String>) -> Page {
    let id = id
        .parse::<Uuid>()
        .map_err(|_| bad(format!("{id:?} is not a job id")))?;
    let record = app
        .client
        .job(id)
        .await?
        .ok_or_else(|| not_found(format!("no job {id}")))?;
    let status = record.status();
    let mut body = format!(
        "<section><h2>Job <span class=\"id\">{id}</span></h2><p>State: <strong id=\"state\" class=\"state {s}\">{s}</strong></p>",
        s = status_name(status)
    );
    if !app.options.read_only {
        body.push_str("<div class=\"actions\">");
        let path = |action: &str| format!("/jobs/{id}/{action}");
        match status {
            JobStatus::Fatal | JobStatus::Cancelled => {
                body.push_str(&form(&app, &path("retry"), "retry", false));
            }
            JobStatus::Unprocessed => {
                body.push_str(&form(&app, &path("run-now"), "run now", false));
                body.push_str(&form(&app, &path("cancel"), "cancel", true));
            }
            JobStatus::Processing => body.push_str(&form(&app, &path("cancel"), "cancel", true)),
            _ => {}
        }
        body.push_str("</div>");
    }
    body.push_str(&record_table(&record));
    body.push_str("<h3>Attempts</h3>");
    let attempts = record.attempts();
    if attempts.is_empty() {
        body.push_str("<p>No attempt yet.</p>");
    } else {
        body.push_str("<ol class=\"timeline\" id=\"attempts\">");
        for a in &attempts {
            let outcome = format!("{:?}", a.outcome).to_lowercase();
            let error = match (&a.kind, &a.message) {
                (Some(k), Some(m)) => format!("<pre>{}: {}</pre>", esc(k), esc(m)),
                (None, Some(m)) => format!("<pre>{}</pre>", esc(m)),
                _ => String::new(),
            };
            let _ = write!(
                body,
                "<li class=\"{outcome}\"><strong>Attempt {}</strong>: {outcome} · worker {} · {} → {}{error}</li>",
                a.attempt,
                esc(a.worker.as_deref().unwrap_or("?")),
                time(a.started_at),
                time(a.ended_at),
            );
        }
        body.push_str("</ol>");
    }
    body.push_str("</section>");
    Ok(Html(page("Job", "/jobs", &body)))
}

fn record_table(record: &JobRecord) -> String {
    let mut table = String::from("<div class=\"scroll\"><table class=\"record\">");
    let rows = [
        ("type", Some(record.task_type.clone())),
        ("queue", Some(record.queue.clone())),
        ("priority", Some(record.priority.to_string())),
        ("posted", Some(time(Some(record.posted_at)))),
        ("finished", record.finalized_at.map(|t| time(Some(t)))),
        ("tenant", record.tenant.clone()),
        ("correlation id", record.correlation_id.clone()),
        (
            "worker",
            record.locked_by.clone().or(record.last_worker.clone()),
        ),
    ];
    for (k, v) in rows {
        let _ = write!(
            table,
            "<tr><th>{k}</th><td>{}</td></tr>",
            esc(v.as_deref().unwrap_or_default())
        );
    }
    for (k, v) in [
        ("payload", &record.payload),
        ("output", &record.output_json),
        ("metadata", &record.metadata),
    ] {
        let _ = write!(
            table,
            "<tr><th>{k}</th><td><pre id=\"{k}\">{}</pre></td></tr>",
            esc(&pretty(v.as_deref()))
        );
    }
    table.push_str("</table></div>");
    table
}

/// JSON indented, or the text as it is.
fn pretty(text: Option<&str>) -> String {
    let text = text.unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_owned())
}

async fn job_action(
    State(app): Shared,
    Path((id, action)): Path<(String, String)>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, Failure> {
    check_csrf(&app, form)?;
    let id = id
        .parse::<Uuid>()
        .map_err(|_| bad(format!("{id:?} is not a job id")))?;
    let client = &app.client;
    let found = match action.as_str() {
        "retry" => client.retry(id).await? != sk_runtime::RetryOutcome::NotFound,
        "cancel" => client.cancel(id).await? != sk_runtime::CancelOutcome::NotFound,
        "run-now" => client.run_now(id).await? != sk_runtime::RescheduleOutcome::NotFound,
        _ => return Err(not_found(format!("no action {action:?} on a job"))),
    };
    if !found {
        return Err(not_found(format!("no job {id}")));
    }
    Ok(Redirect::to(&format!("/jobs/{id}")))
}

async fn errors(State(app): Shared) -> Page {
    let groups = app
        .client
        .error_groups(Utc::now() - Duration::hours(24), 50)
        .await?;
    let mut body = String::from("<section><h2>Errors, last 24 hours</h2>");
    if groups.is_empty() {
        body.push_str("<p>No errors.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"errors\"><tr><th>jobs</th><th>type</th><th>message</th>\
             <th>first seen</th><th>last seen</th><th>sample</th></tr>",
        );
        for g in &groups {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td class=\"message\">{}</td><td>{}</td><td>{}</td>\
                 <td><a href=\"/jobs/{s}\">{short}</a></td></tr>",
                g.count,
                esc(g.kind.as_deref().unwrap_or_default()),
                esc(g.message.as_deref().unwrap_or_default()),
                time(g.first_seen),
                time(g.last_seen),
                s = g.sample,
                short = &g.sample.to_string()[..8],
            );
        }
        body.push_str("</table></div>");
    }
    body.push_str("</section>");
    Ok(Html(page("Errors", "/errors", &body)))
}

/// The queues' state as Prometheus gauges, read through the client (workers export
/// their own counters and histograms: docs/operations.md).
async fn metrics(State(app): Shared) -> Result<Response, Failure> {
    let client = &app.client;
    let counts = client.count_by(CountBy::Queue).await?;
    let queues = client.queues().await?;
    let workers = client.workers().await?;
    let mut text = String::from(
        "# HELP sk_queue_jobs Jobs of a queue by state (fatal and cancelled: still in the results).\n\
         # TYPE sk_queue_jobs gauge\n",
    );
    for c in &counts {
        let queue = label(c.key.as_deref().unwrap_or_default());
        for (state, n) in [
            ("available", c.available),
            ("scheduled", c.scheduled),
            ("pending", c.pending),
            ("retrying", c.retrying),
            ("running", c.running),
            ("fatal", c.fatal),
            ("cancelled", c.cancelled),
        ] {
            let _ = writeln!(
                text,
                "sk_queue_jobs{{queue=\"{queue}\",state=\"{state}\"}} {n}"
            );
        }
    }
    text.push_str(
        "# HELP sk_queue_paused 1 while an operator has paused the queue.\n# TYPE sk_queue_paused gauge\n",
    );
    for q in &queues {
        let _ = writeln!(
            text,
            "sk_queue_paused{{queue=\"{}\"}} {}",
            label(&q.name),
            u8::from(q.paused_at.is_some())
        );
    }
    let alive = workers.iter().filter(|w| w.alive).count();
    let _ = write!(
        text,
        "# HELP sk_workers Workers by whether they heartbeat lately.\n# TYPE sk_workers gauge\n\
         sk_workers{{alive=\"true\"}} {alive}\nsk_workers{{alive=\"false\"}} {}\n",
        workers.len() - alive
    );
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// A Prometheus label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn bad(message: String) -> Failure {
    Failure(StatusCode::BAD_REQUEST, message)
}

fn not_found(message: String) -> Failure {
    Failure(StatusCode::NOT_FOUND, message)
}

/// A button that POSTs to `action` with the CSRF token.
fn form(app: &App, action: &str, label: &str, confirm: bool) -> String {
    let confirm = if confirm {
        " data-confirm=\"Sure?\""
    } else {
        ""
    };
    format!(
        "<form method=\"post\" action=\"{}\"{confirm}><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <button name=\"do\" value=\"{label}\">{label}</button></form>",
        esc(action),
        app.csrf
    )
}

fn workers_table(workers: &[WorkerInfo]) -> String {
    if workers.is_empty() {
        return "<p id=\"workers\">No workers.</p>".to_owned();
    }
    let mut table = String::from(
        "<div class=\"scroll\"><table id=\"workers\"><tr><th>worker</th><th>host</th><th>alive</th>\
         <th>running</th><th>concurrency</th><th>queues</th><th>last seen</th></tr>",
    );
    for w in workers {
        let _ = write!(
            table,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&w.id),
            esc(&w.host),
            if w.alive { "yes" } else { "no" },
            w.running,
            w.concurrency,
            esc(&w
                .queues
                .as_ref()
                .map_or_else(|| "all".to_owned(), |q| q.join(", "))),
            time(Some(w.seen_at)),
        );
    }
    table.push_str("</table></div>");
    table
}

const STYLE: &str = "
*{box-sizing:border-box}body{margin:0;font:15px/1.4 system-ui,sans-serif;color:#1d2330;background:#f6f7f9}
header{display:flex;flex-wrap:wrap;align-items:center;gap:.2rem 1rem;padding:.6rem 1rem;background:#1d2330;color:#fff}
header b{margin-right:1rem}header a{color:#cfd6e4;text-decoration:none}header a.here{color:#fff;font-weight:600}
main{padding:1rem;max-width:1100px;margin:auto}section{background:#fff;border:1px solid #e1e4ea;border-radius:6px;padding:.8rem 1rem;margin-bottom:1rem}
h2{font-size:1.1rem;margin:.2rem 0 .6rem}h3{font-size:1rem}.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #eef0f3;vertical-align:top}
td.message{max-width:28rem;overflow-wrap:anywhere}pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0;font-size:13px}
.tag{background:#f3e2b3;border-radius:3px;padding:0 .3rem;font-size:12px}.error{color:#a0192d}
.state.fatal{color:#a0192d}.state.processed{color:#1b7a3a}.state.cancelled{color:#6b7280}
.chart{width:100%;max-width:600px;height:auto}.chart .ok{fill:#3c9a5f}.chart .failed{fill:#d24b5a}.chart .axis{stroke:#999}.chart text{font-size:10px;fill:#555}
.actions{display:flex;gap:.5rem;margin:.5rem 0}form{display:inline}button{font:inherit;padding:.25rem .8rem;cursor:pointer}
.filters{display:flex;flex-wrap:wrap;gap:.4rem;margin-bottom:.6rem}.filters input{width:9rem}
.timeline li{margin-bottom:.4rem}.timeline li.failed,.timeline li.panicked,.timeline li.timedout{color:#a0192d}
.id{font-family:ui-monospace,monospace;font-size:13px;overflow-wrap:anywhere}
";

/// Asks before a form marked `data-confirm` posts; replaces `<main>` with a fresh copy of
/// the page every few seconds, while the page is visible and nobody is typing in it. (The
/// only script: [`policy`] allows it by its hash, and no inline handler.)
const SCRIPT: &str = "
document.addEventListener('submit', (event) => {
  const ask = event.target.dataset.confirm;
  if (ask !== undefined && !confirm(ask)) event.preventDefault();
});
setInterval(async () => {
  if (document.hidden || document.activeElement?.matches('input,select,textarea')) return;
  try {
    const response = await fetch(location.href, {headers: {'x-sk-refresh': '1'}});
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), 'text/html');
    const main = fresh.querySelector('main');
    if (main) { document.querySelector('main').replaceWith(main); document.body.dataset.refreshed = Date.now(); }
  } catch (_) {}
}, 2000);
";

fn page(title: &str, here: &str, body: &str) -> String {
    let mut nav = String::new();
    for (href, name) in [
        ("/", "Overview"),
        ("/queues", "Queues"),
        ("/jobs", "Jobs"),
        ("/errors", "Errors"),
    ] {
        let class = if href == here { " class=\"here\"" } else { "" };
        let _ = write!(nav, "<a href=\"{href}\"{class}>{name}</a>");
    }
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · sk</title><style>{STYLE}</style></head>\
         <body><header><b>sk</b>{nav}</header><main>{body}</main><script>{SCRIPT}</script></body></html>",
        title = esc(title)
    )
}

/// Text for HTML, in an element or an attribute.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Text for a URL's path segment or query value.
fn url(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_takes_the_token_as_password() {
        let mut headers = HeaderMap::new();
        // "ops:s3cret"
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic b3BzOnMzY3JldA=="),
        );
        assert!(authorized(&headers, "s3cret"));
        assert!(!authorized(&headers, "s3cre"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret"),
        );
        assert!(authorized(&headers, "s3cret"));
        assert!(!authorized(&HeaderMap::new(), "s3cret"));
    }

    #[test]
    fn text_is_escaped_for_html_and_urls() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(url("mail/eu 1"), "mail%2Feu%201");
    }
}
