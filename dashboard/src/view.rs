//! The page, in maud templates (checked when the crate compiles): the frame with the
//! search and token fields, and its live part, which the script fetches again every
//! second from `parts` and swaps in.

use std::time::Duration;

use liveness_core::{
    DeathRecord, ItemRecord, ItemState, ItemStateKind, LeaseInfo, LeaseStatus, StoreTime,
};
use maud::{html, Markup, DOCTYPE};

use crate::data::{self, Snapshot, View};
use crate::samples::{self, Sample};
use crate::{Actions, Shared};

/// How many characters of a payload the items list shows.
const PREVIEW: usize = 64;

/// The whole page.
pub(crate) fn page(shared: &Shared, view: &View, snap: &Snapshot) -> Markup {
    let actions_on = matches!(shared.options.actions, Actions::Token(_));
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "liveness dashboard" }
                link rel="stylesheet" href="assets/app.css";
            }
            body {
                header {
                    h1 { "liveness" }
                    span.store title="the store" {
                        (shared.store.backend()) " · "
                        (shared.store.issuer().namespace().as_str())
                        @if !shared.options.store_description.is_empty() {
                            " · " (shared.options.store_description)
                        }
                    }
                    form #search method="get" action="" {
                        input type="search" name="q" placeholder="member or holder"
                            value=(view.q.as_deref().unwrap_or(""));
                        select name="g" {
                            option value="" selected[view.grouping() == data::Grouping::Session] { "by session" }
                            option value="process" selected[view.grouping() == data::Grouping::Process] { "by process" }
                            option value="none" selected[view.grouping() == data::Grouping::None] { "no grouping" }
                        }
                        @if let Some(i) = &view.i { input type="hidden" name="i" value=(i); }
                        button type="submit" { "Search" }
                    }
                    @if actions_on {
                        label.token { "token " input #token type="password" autocomplete="off" size="12"; }
                    } @else {
                        span.readonly { "read-only" }
                    }
                    span #updated aria-live="polite" {}
                }
                div #msg role="status" {}
                main #live { (live(shared, view, snap)) }
                script src="assets/app.js" defer {}
            }
        }
    }
}

/// The part that refreshes itself.
pub(crate) fn live(shared: &Shared, view: &View, snap: &Snapshot) -> Markup {
    let now = snap.now.as_ref().ok().map(|t| t.since_epoch());
    let size = shared.options.page_size;
    html! {
        @if let Some(why) = snap.failure() {
            div.banner.down #down { "The store does not answer: " (why) }
        }
        div.row {
            (checker(shared, snap))
            (charts(&shared.samples.all()))
        }
        (members(view, snap))
        (leaders(snap))
        (deaths(view, snap, now, size))
        (items(view, snap, size))
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 120.0 {
        format!("{s:.1}s")
    } else if s < 7200.0 {
        format!("{:.0}m", s / 60.0)
    } else {
        format!("{:.0}h", s / 3600.0)
    }
}

fn checker(shared: &Shared, snap: &Snapshot) -> Markup {
    // Expired leases on the page: only a checker reaps them, and when none runs in
    // the fleet they stay (their items with them).
    let expired = snap
        .members
        .as_ref()
        .map_or(0, |m| m.rows.iter().filter(|r| !r.is_live()).count());
    html! {
        section #checker {
            h2 { "Checker" }
            @match &shared.checker {
                None => {
                    p.muted { "No checker runs in this process." }
                    @if expired > 0 {
                        p.state.bad #unreaped {
                            (count(expired as u64, "expired lease")) " not yet reaped: only a checker \
                            declares them dead and requeues their items. If this stays, no \
                            checker runs in this fleet (`liveness check` starts one)."
                        }
                    }
                }
                Some(source) => {
                    @let state = source.state();
                    p.state.ok[state.healthy].bad[!state.healthy] {
                        (if state.healthy { "healthy" } else { "not healthy" })
                    }
                    p.summary { (state.summary) }
                    @if let Some(ago) = state.last_round.filter(|_| !state.healthy) {
                        p.muted { "last completed round " (secs(ago)) " ago" }
                    }
                }
            }
        }
    }
}

/// A small line chart of `values` (the newest at the right), with its last value.
fn spark(title: &str, unit: &str, values: &[Option<f64>]) -> Markup {
    const W: f64 = 240.0;
    const H: f64 = 40.0;
    let max = values.iter().flatten().fold(0.0f64, |a, b| a.max(*b));
    let scale = if max > 0.0 { (H - 6.0) / max } else { 0.0 };
    // Stretched over the width: the samples so far, up to the ring's two minutes.
    let step = W / values.len().saturating_sub(1).max(1) as f64;
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            v.map(|v| format!("{:.1},{:.1}", i as f64 * step, H - 3.0 - v * scale))
        })
        .collect();
    // A value with no neighbour draws no line: a dot shows it.
    let dots: Vec<(f64, f64)> = values
        .iter()
        .enumerate()
        .filter(|(i, v)| {
            v.is_some()
                && (*i == 0 || values[i - 1].is_none())
                && values.get(i + 1).is_none_or(Option::is_none)
        })
        .filter_map(|(i, v)| v.map(|v| (i as f64 * step, H - 3.0 - v * scale)))
        .collect();
    let last = values.iter().rev().flatten().next();
    html! {
        figure.chart {
            figcaption {
                (title) ": "
                b { @match last { Some(v) => { (format!("{v:.1}")) " " (unit) }, None => "–" } }
                span.muted { " (max " (format!("{max:.1}")) ")" }
            }
            svg viewBox=(format!("0 0 {W} {H}")) width=(W) height=(H) role="img" aria-label=(title) {
                line x1="0" y1=(H - 0.5) x2=(W) y2=(H - 0.5) stroke="#ccc" {}
                polyline points=(points.join(" ")) fill="none" stroke="#2a6fdb" stroke-width="1.5" {}
                @for (x, y) in dots {
                    circle cx=(format!("{x:.1}")) cy=(format!("{y:.1}")) r="2.5" fill="#2a6fdb" {}
                }
            }
        }
    }
}

fn charts(samples: &[Sample]) -> Markup {
    let deaths: Vec<Option<f64>> = samples::deaths_per_minute(samples)
        .into_iter()
        .map(Some)
        .collect();
    let renewals: Vec<Option<f64>> = samples.iter().map(|s| Some(s.renewals_per_s)).collect();
    let delays: Vec<Option<f64>> = samples
        .iter()
        .map(|s| s.delay.map(|d| d.as_secs_f64() * 1000.0))
        .collect();
    html! {
        section #charts {
            h2 { "Recent samples" span.muted { " (up to two minutes)" } }
            (spark("deaths per minute", "/min", &deaths))
            (spark("renewals per second (first page, seen)", "/s", &renewals))
            (spark("detection delay beyond expiry", "ms", &delays))
        }
    }
}

fn time_left(lease: &LeaseInfo) -> Markup {
    match lease.status {
        LeaseStatus::Live { remaining } => html! { (secs(remaining)) },
        LeaseStatus::Expired => html! { span.bad { "expired" } },
        _ => html! { span.muted { "unknown" } },
    }
}

/// `n` with thousands separators: `10,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` and `word`, plural unless `n` is 1: `1 member`, `10,000 members`.
fn count(n: u64, word: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} {word}{s}", thousands(n))
}

/// A group's time left: the least of its members', `expired` when any is expired.
fn group_left(rows: &[&LeaseInfo]) -> String {
    let mut least: Option<Duration> = None;
    for lease in rows {
        match lease.status {
            LeaseStatus::Expired => return "expired".into(),
            LeaseStatus::Live { remaining } => {
                least = Some(least.map_or(remaining, |l| l.min(remaining)));
            }
            // A status this dashboard does not know says nothing of the time left.
            _ => {}
        }
    }
    least.map_or_else(|| "expired".into(), |l| format!("{} left", secs(l)))
}

fn members(view: &View, snap: &Snapshot) -> Markup {
    let grouping = view.grouping();
    html! {
        section #members {
            h2 {
                "Members"
                @if let Some(q) = view.search() { " matching “" (q) "”" }
            }
            @match &snap.members {
                Err(_) => p.muted { "not available" },
                Ok(page) => {
                    @if page.rows.is_empty() {
                        p.muted #no-members { "No members." }
                    } @else {
                        table {
                            thead { tr { th { "member" } th { "holder" } th { "token" } th { "time left" } } }
                            @let groups = data::grouped(&page.rows, grouping);
                            @let headed = groups.iter().any(|(g, _)| g.is_some());
                            @for (group, rows) in &groups {
                                tbody {
                                    @match (group, grouping) {
                                        (Some(name), data::Grouping::Session) => {
                                            tr.group.session data-session=(name) {
                                                th colspan="4" {
                                                    "process " (name) " · " (count(rows.len() as u64, "member"))
                                                    " · " (group_left(rows))
                                                }
                                            }
                                        },
                                        (Some(name), _) => tr.group { th colspan="4" { "process " (name) " · " (rows.len()) } },
                                        (None, _) if headed => tr.group { th colspan="4" { "own leases · " (count(rows.len() as u64, "member")) } },
                                        (None, _) => {},
                                    }
                                    @for lease in rows.iter().copied() {
                                        tr.member data-name=(lease.key.name().as_str()) {
                                            td { (lease.key.name().as_str()) }
                                            td.mono { (lease.holder.as_str()) }
                                            td.num { (lease.token.0) }
                                            td.num { (time_left(lease)) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    p.pager {
                        @if view.m.is_some() { a href=(view.link(|v| v.m = None)) { "« first" } " " }
                        @if let Some(next) = &page.next {
                            a.next href=(view.link(|v| v.m = Some(next.clone()))) { "next »" }
                        }
                        @if view.search().is_some() { span.muted { " read " (page.scanned) " leases" } }
                    }
                }
            }
        }
    }
}

/// Who holds each singleton role ([`Election`](liveness_core::Election)), with its
/// fencing token: shown when some role has a lease, first page only.
fn leaders(snap: &Snapshot) -> Markup {
    let Ok(rows) = &snap.leaders else {
        return html! {};
    };
    html! {
        @if !rows.is_empty() {
            section #leaders {
                h2 { "Leaders" }
                table {
                    thead { tr { th { "role" } th { "holder" } th { "token" } th { "time left" } } }
                    tbody {
                        @for lease in rows {
                            tr.leader data-role=(lease.key.name().as_str()) {
                                td { (lease.key.name().as_str()) }
                                td.mono { (lease.holder.as_str()) }
                                td.num { (lease.token.0) }
                                td.num { (time_left(lease)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn death_row(d: &DeathRecord, now: Option<Duration>) -> Markup {
    let (requeued, dead) = match d.swept {
        Some(s) => (s.requeued.to_string(), s.dead_lettered.to_string()),
        None => ("…".to_string(), "…".to_string()),
    };
    let members = d.swept.map_or(0, |s| s.members);
    html! {
        tr.death data-name=(d.key.name().as_str()) data-token=(d.token.0) data-requeued=(requeued) data-members=(members) {
            td {
                @if members > 0 {
                    "process " (d.key.name().as_str()) ": " (count(members, "member"))
                } @else {
                    (d.key.name().as_str())
                }
            }
            td { (d.cause.as_str()) }
            td.mono { (d.holder.as_str()) }
            td.num { (d.token.0) }
            td.num { @if let Some(now) = now { (secs(now.saturating_sub(d.at.since_epoch()))) " ago" } }
            td.num { (requeued) }
            td.num { (dead) }
        }
    }
}

fn deaths(view: &View, snap: &Snapshot, now: Option<Duration>, size: usize) -> Markup {
    html! {
        section #deaths {
            h2 { "Recent deaths" }
            @match &snap.deaths {
                Err(_) => p.muted { "not available" },
                Ok(rows) if rows.is_empty() => p.muted { "No deaths recorded." },
                Ok(rows) => {
                    table {
                        thead { tr { th { "member" } th { "cause" } th { "holder" } th { "token" } th { "when" } th { "requeued" } th { "dead-lettered" } } }
                        tbody { @for d in rows { (death_row(d, now)) } }
                    }
                    p.pager {
                        @if view.d.is_some() { a href=(view.link(|v| v.d = None)) { "« newest" } " " }
                        @if let Some(last) = rows.last().filter(|_| rows.len() >= size) {
                            a.next href=(view.link(|v| v.d = Some(last.seq))) { "older »" }
                        }
                    }
                }
            }
        }
    }
}

/// How long before `now` the store time `at` was, as the page shows it.
fn ago(now: Option<StoreTime>, at: Option<StoreTime>) -> Option<String> {
    Some(secs(now?.saturating_since(at?)))
}

fn item_row(r: &ItemRecord, now: Option<StoreTime>) -> Markup {
    let item = &r.item;
    let age = ago(now, r.times.enqueued);
    let tried = ago(now, r.times.attempted).map(|t| format!("last tried {t} ago"));
    html! {
        tr.item data-id=(item.id.0) {
            td.num { (item.id.0) }
            td.mono.queue { (item.queue) }
            td.num.age title=[tried] { (age.as_deref().unwrap_or("-")) }
            td.mono.payload { (data::preview(&item.payload, PREVIEW)) }
            td.num { (item.attempts) "/" (item.max_attempts) }
            td.mono.error title=[r.last_error.as_deref()] {
                @match &r.last_error {
                    Some(e) => (data::preview(e.as_bytes(), PREVIEW)),
                    None => "-",
                }
            }
            td {
                @match r.state {
                    ItemState::Pending => {
                        "pending "
                        button.cancel type="button" data-id=(item.id.0) data-what="cancel" { "cancel" }
                    },
                    ItemState::Owned(token) => { "owned by " (token.0) },
                    ItemState::DeadLettered => {
                        button.retry type="button" data-id=(item.id.0) { "retry" }
                        " "
                        button.cancel type="button" data-id=(item.id.0) data-what="discard" { "discard" }
                    },
                }
            }
        }
    }
}

fn items(view: &View, snap: &Snapshot, size: usize) -> Markup {
    let state = view.state();
    let tab = |kind: ItemStateKind, count: Option<u64>| {
        html! {
            a.tab.on[kind == state] href=(view.link(|v| { v.i = Some(kind.as_str().to_string()); v.ia = None; })) {
                (kind.as_str()) " " b.count data-state=(kind.as_str()) { @match count { Some(n) => (n), None => "?" } }
            }
        }
    };
    let counts = snap.counts.as_ref().ok();
    let now = snap.now.as_ref().ok().copied();
    html! {
        section #items {
            h2 { "Items" }
            p.tabs {
                (tab(ItemStateKind::Pending, counts.map(|c| c.pending)))
                (tab(ItemStateKind::Owned, counts.map(|c| c.owned)))
                (tab(ItemStateKind::DeadLettered, counts.map(|c| c.dead_lettered)))
                @if state == ItemStateKind::DeadLettered && counts.is_some_and(|c| c.dead_lettered > 0) {
                    button #retry-all type="button" { "retry all" }
                }
            }
            @if let Ok(queues) = &snap.queues {
                @if queues.iter().any(|q| !q.queue.is_default()) {
                    table #queues {
                        thead { tr { th { "queue" } th { "pending" } th { "owned" } th { "dead-lettered" } } }
                        tbody {
                            @for q in queues {
                                tr.queue data-queue=(q.queue) {
                                    td.mono { (q.queue) }
                                    td.num { (thousands(q.counts.pending)) }
                                    td.num { (thousands(q.counts.owned)) }
                                    td.num { (thousands(q.counts.dead_lettered)) }
                                }
                            }
                        }
                    }
                }
            }
            @match &snap.items {
                Err(_) => p.muted { "not available" },
                Ok(rows) if rows.is_empty() => p.muted { "None " (state.as_str()) "." },
                Ok(rows) => {
                    table {
                        thead { tr { th { "id" } th { "queue" } th { "age" } th { "payload" } th { "attempts" } th { "last error" } th {} } }
                        tbody { @for r in rows { (item_row(r, now)) } }
                    }
                    p.pager {
                        @if view.ia.is_some() { a href=(view.link(|v| v.ia = None)) { "« first" } " " }
                        @if let Some(last) = rows.last().filter(|_| rows.len() >= size) {
                            a.next href=(view.link(|v| v.ia = Some(last.item.id.0))) { "next »" }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_well() {
        assert_eq!(count(1, "member"), "1 member");
        assert_eq!(count(10_000, "member"), "10,000 members");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(0), "0");
    }
}
