//! What every page shares: the document around a page's body, its one style sheet and
//! script, the action button, the workers' table and links. Pages are written in maud's
//! `html!`, which escapes every value it is given; only [`STYLE`] and [`SCRIPT`], the
//! dashboard's own constants, go in unescaped.

use maud::{html, Markup, PreEscaped, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sk_runtime::WorkerInfo;

use super::App;
use crate::output::time;

pub(super) const STYLE: &str = "
*{box-sizing:border-box}body{margin:0;font:15px/1.4 system-ui,sans-serif;color:#1d2330;background:#f6f7f9}
header{display:flex;flex-wrap:wrap;align-items:center;gap:.2rem 1rem;padding:.6rem 1rem;background:#1d2330;color:#fff}
header b{margin-right:1rem}header a{color:#cfd6e4;text-decoration:none}header a.here{color:#fff;font-weight:600}
main{padding:1rem;max-width:1400px;margin:auto}section{background:#fff;border:1px solid #e1e4ea;border-radius:6px;padding:.8rem 1rem;margin-bottom:1rem}
h2{font-size:1.1rem;margin:.2rem 0 .6rem}h3{font-size:1rem}.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #eef0f3;vertical-align:top}
td.message{max-width:28rem;overflow-wrap:anywhere}pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0;font-size:13px}
.tag{background:#f3e2b3;border-radius:3px;padding:0 .3rem;font-size:12px}.error{color:#a0192d}
.state.fatal{color:#a0192d}.state.processed{color:#1b7a3a}.state.cancelled{color:#6b7280}
.chart{width:100%;height:auto;display:block}.chart .ok{fill:#3c9a5f}.chart .failed{fill:#d24b5a}.chart .axis{stroke:#999}.chart .grid{stroke:#eef0f3}.chart text{font-size:11px;fill:#555}
.graph{display:block}.graph .edge{stroke:#b8bfcc}.graph .node{fill:#eef0f3;stroke:#8a93a3}.graph .node.processed{fill:#d7efdf}.graph .node.fatal{fill:#f6d5da}.graph .node.cancelled{fill:#e5e7eb}.graph .node.running{fill:#d6e6fb}.graph text{font-size:11px;fill:#1d2330}
.spark{width:96px;height:20px}.spark rect{fill:#d24b5a}.done{background:#e3f4e8;border-radius:4px;padding:.3rem .6rem}
.actions{display:flex;flex-wrap:wrap;gap:.5rem;margin:.5rem 0}form{display:inline}button{font:inherit;padding:.25rem .8rem;cursor:pointer}
.filters{display:flex;flex-wrap:wrap;gap:.4rem;margin-bottom:.6rem}.filters input{width:9rem}
.timeline li{margin-bottom:.4rem}.timeline li.failed,.timeline li.panicked,.timeline li.timedout{color:#a0192d}
.id{font-family:ui-monospace,monospace;font-size:13px;overflow-wrap:anywhere}
";

/// Asks before a form (or its button) marked `data-confirm` posts, with `{n}` the rows
/// checked and `{action}` the action picked; checks every row with "select all";
/// replaces `<main>` with a fresh copy of the page every few seconds, while the page is
/// visible, nobody is typing in it and no row is checked. (The
/// only script: the Content-Security-Policy allows it by its hash, and no inline handler.)
pub(super) const SCRIPT: &str = "
document.addEventListener('submit', (event) => {
  const ask = event.submitter?.dataset.confirm ?? event.target.dataset.confirm;
  if (ask === undefined) return;
  const form = event.target;
  const text = ask.replace('{n}', form.querySelectorAll('input[name=id]:checked').length)
    .replace('{action}', form.querySelector('select[name=do]')?.value ?? '');
  if (!confirm(text)) event.preventDefault();
});
document.addEventListener('change', (event) => {
  if (event.target.id !== 'select-all') return;
  for (const box of document.querySelectorAll('input[name=id]')) box.checked = event.target.checked;
});
setInterval(async () => {
  if (document.hidden || document.activeElement?.matches('input,select,textarea')) return;
  if (document.querySelector('input[type=checkbox]:checked')) return;
  try {
    const response = await fetch(location.href, {headers: {'x-sk-refresh': '1'}});
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), 'text/html');
    const main = fresh.querySelector('main');
    if (main) { document.querySelector('main').replaceWith(main); document.body.dataset.refreshed = Date.now(); }
  } catch (_) {}
}, 2000);
";

/// The whole document: `body` in `<main>`, under the navigation with `here` marked.
pub(super) fn page(title: &str, here: &str, body: Markup) -> Markup {
    const NAV: [(&str, &str); 7] = [
        ("/", "Overview"),
        ("/queues", "Queues"),
        ("/jobs", "Jobs"),
        ("/errors", "Errors"),
        ("/workflows", "Workflows"),
        ("/batches", "Batches"),
        ("/audit", "Audit"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · sk" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    b { "sk" }
                    @for (href, name) in NAV {
                        a href=(href) class=[(href == here).then_some("here")] { (name) }
                    }
                }
                main { (body) }
                script { (PreEscaped(SCRIPT)) }
            }
        }
    }
}

/// A button that POSTs to `action` with the CSRF token; `confirm`, after asking.
pub(super) fn button(app: &App, action: &str, label: &str, confirm: bool) -> Markup {
    html! {
        form method="post" action=(action) data-confirm=[confirm.then_some("Sure?")] {
            input type="hidden" name="csrf" value=(app.csrf);
            button name="do" value=(label) { (label) }
        }
    }
}

pub(super) fn workers_table(workers: &[WorkerInfo]) -> Markup {
    if workers.is_empty() {
        return html! { p #workers { "No workers." } };
    }
    html! {
        div.scroll { table #workers {
            tr { th { "worker" } th { "host" } th { "alive" } th { "running" } th { "concurrency" }
                 th { "queues" } th { "last seen" } }
            @for w in workers {
                tr {
                    td { (w.id) }
                    td { (w.host) }
                    td { (if w.alive { "yes" } else { "no" }) }
                    td { (w.running) }
                    td { (w.concurrency) }
                    td { (w.queues.as_ref().map_or_else(|| "all".to_owned(), |q| q.join(", "))) }
                    td { (time(Some(w.seen_at))) }
                }
            }
        } }
    }
}

/// What [`segment`] leaves as it is: letters, digits and `-_.~` (RFC 3986's unreserved).
const RESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Text for a URL's path segment or query value (the markup then escapes the URL).
pub(super) fn segment(text: &str) -> String {
    utf8_percent_encode(text, RESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_html_and_urls() {
        let page = page("<a href=\"x\">'&'</a>", "", html! {}).into_string();
        assert!(
            page.contains("<title>&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt; · sk</title>"),
            "{page}"
        );
        assert_eq!(segment("mail/eu 1"), "mail%2Feu%201");
    }
}
