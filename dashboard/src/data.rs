//! What one page shows, read from the store a page at a time: the members (searched
//! and grouped), the newest deaths, the item counts and one page of items.

use std::future::Future;
use std::time::Duration;

use liveness_core::{
    DeathRecord, HolderId, ItemCounts, ItemId, ItemRecord, ItemStateKind, Key, LeaseInfo, Name,
    Page, QueueCounts, StoreTime,
};
use serde::Deserialize;

use crate::Shared;

/// The most leases one members request reads while it searches: a search that
/// matches little stops there and offers to go on from where it stopped.
const SCAN_BUDGET: usize = 2000;

/// How the members list is grouped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Grouping {
    /// By session (the default): the members riding one session (one process,
    /// [`LeaseInfo::session`]) together under it, then the leases of their own. A page
    /// where no member rides a session is one list in name order.
    #[default]
    Session,
    /// One list in name order.
    None,
    /// By process: the holder id without the instance nonce a member adds when it
    /// joins (`host-a/4242#3f9c…` → `host-a/4242`), which by convention names the
    /// process.
    Process,
}

impl Grouping {
    /// The group a lease falls in: its session's key, or its holder's process;
    /// `None` when not grouping, and for a lease of its own when grouping by session.
    pub fn group_of(self, lease: &LeaseInfo) -> Option<String> {
        match self {
            Grouping::None => None,
            Grouping::Session => lease.session.as_ref().map(|s| s.name().to_string()),
            Grouping::Process => Some(process_of(lease.holder.as_str()).to_string()),
        }
    }

    pub(crate) fn parse(s: Option<&str>) -> Grouping {
        match s {
            Some("process") => Grouping::Process,
            Some("none") => Grouping::None,
            _ => Grouping::Session,
        }
    }

    pub(crate) fn as_param(self) -> Option<&'static str> {
        match self {
            Grouping::Session => None,
            Grouping::None => Some("none"),
            Grouping::Process => Some("process"),
        }
    }
}

/// The holder id without its instance nonce.
fn process_of(holder: &str) -> &str {
    match holder.rsplit_once(HolderId::NONCE_SEPARATOR) {
        Some((configured, nonce))
            if nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            configured
        }
        _ => holder,
    }
}

/// The page's query: search, cursors and choices. Every field is optional.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct View {
    /// Search: members whose name or holder contains this.
    pub q: Option<String>,
    /// Members after this name.
    pub m: Option<String>,
    /// Deaths before this seq.
    pub d: Option<u64>,
    /// The item state listed (`pending`, `owned`, `dead-lettered`); default dead letters.
    pub i: Option<String>,
    /// Items after this id.
    pub ia: Option<u64>,
    /// `process` to group the members by process, `none` for one list; by session
    /// otherwise.
    pub g: Option<String>,
}

impl View {
    pub fn state(&self) -> ItemStateKind {
        match self.i.as_deref() {
            Some("pending") => ItemStateKind::Pending,
            Some("owned") => ItemStateKind::Owned,
            _ => ItemStateKind::DeadLettered,
        }
    }

    pub fn grouping(&self) -> Grouping {
        Grouping::parse(self.g.as_deref())
    }

    pub fn search(&self) -> Option<&str> {
        self.q.as_deref().map(str::trim).filter(|q| !q.is_empty())
    }

    /// This view's query string with some fields changed: for links.
    pub fn link(&self, change: impl FnOnce(&mut View)) -> String {
        let mut v = self.clone();
        change(&mut v);
        let mut parts = Vec::new();
        let mut push = |k: &str, val: Option<String>| {
            if let Some(val) = val {
                parts.push(format!("{k}={}", encode(&val)));
            }
        };
        push("q", v.q.clone().filter(|q| !q.trim().is_empty()));
        push("m", v.m.clone());
        push("d", v.d.map(|d| d.to_string()));
        push("i", v.i.clone());
        push("ia", v.ia.map(|d| d.to_string()));
        push("g", v.grouping().as_param().map(str::to_string));
        format!("?{}", parts.join("&"))
    }
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One page of members.
#[derive(Debug, Default)]
pub(crate) struct Members {
    pub rows: Vec<LeaseInfo>,
    /// The name to continue after, when there may be more.
    pub next: Option<String>,
    /// How many leases were read to find these (more than `rows` when searching).
    pub scanned: usize,
}

/// Everything one page shows; each part is what the store answered, or why not.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub now: Result<StoreTime, String>,
    pub members: Result<Members, String>,
    /// Who holds each singleton role (the leases of the space `leaders`), first page.
    pub leaders: Result<Vec<LeaseInfo>, String>,
    pub deaths: Result<Vec<DeathRecord>, String>,
    /// Each queue's items by state, in name order.
    pub queues: Result<Vec<QueueCounts>, String>,
    pub counts: Result<ItemCounts, String>,
    pub items: Result<Vec<ItemRecord>, String>,
}

impl Snapshot {
    /// The first reason the store gave for not answering, if any.
    pub fn failure(&self) -> Option<&str> {
        [
            self.now.as_ref().err(),
            self.members.as_ref().err(),
            self.leaders.as_ref().err(),
            self.deaths.as_ref().err(),
            self.counts.as_ref().err(),
            self.items.as_ref().err(),
        ]
        .into_iter()
        .flatten()
        .next()
        .map(String::as_str)
    }
}

/// Awaits one store read for at most `timeout`.
pub(crate) async fn within<T>(
    timeout: Duration,
    fut: impl Future<Output = liveness_core::Result<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {:.1}s", timeout.as_secs_f64())),
    }
}

/// Reads what `view` shows, every part at once.
pub(crate) async fn read(shared: &Shared, view: &View) -> Snapshot {
    let store = &shared.store;
    let t = shared.options.timeout;
    let size = shared.options.page_size;
    let leaders = liveness_core::Space::leaders();
    let (now, members, leaders, deaths, queues, items) = tokio::join!(
        within(t, store.store_time()),
        within(t, read_members(shared, view)),
        within(t, store.leases(&leaders, Page::first(size))),
        within(t, store.deaths(view.d, size)),
        within(t, store.queue_counts()),
        within(
            t,
            store.items(
                view.state(),
                Page {
                    after: view.ia.map(ItemId),
                    limit: size,
                },
            )
        ),
    );
    // The totals are the queues' sums: one read, one snapshot.
    let counts = queues.as_ref().map_err(Clone::clone).map(|queues| {
        queues.iter().fold(ItemCounts::default(), |mut sum, q| {
            sum.pending += q.counts.pending;
            sum.owned += q.counts.owned;
            sum.dead_lettered += q.counts.dead_lettered;
            sum
        })
    });
    Snapshot {
        now,
        members,
        leaders,
        deaths,
        queues,
        counts,
        items,
    }
}

/// One page of members after `view.m`; when searching, the first `page_size` whose
/// name or holder contains the search, reading at most [`SCAN_BUDGET`] leases.
async fn read_members(shared: &Shared, view: &View) -> liveness_core::Result<Members> {
    let space = &shared.options.space;
    let size = shared.options.page_size;
    let mut after = match &view.m {
        Some(name) => Some(Key::new(space.clone(), Name::new(name)?)),
        None => None,
    };
    let Some(q) = view.search().map(str::to_lowercase) else {
        let page = Page {
            after: after.as_ref(),
            limit: size,
        };
        let rows = shared.store.leases(space, page).await?;
        let next = (rows.len() == size)
            .then(|| rows.last().map(|r| r.key.name().to_string()))
            .flatten();
        let scanned = rows.len();
        return Ok(Members {
            rows,
            next,
            scanned,
        });
    };
    let mut out = Members::default();
    let read = size
        .max(200)
        .min(shared.store.capabilities().max_batch.max(1));
    loop {
        let page = Page {
            after: after.as_ref(),
            limit: read,
        };
        let batch = shared.store.leases(space, page).await?;
        let full = batch.len() == read;
        for lease in batch {
            out.scanned += 1;
            let last = lease.key.clone();
            if matches(&lease, &q) {
                out.rows.push(lease);
            }
            after = Some(last);
            if out.rows.len() == size || out.scanned >= SCAN_BUDGET {
                out.next = after.as_ref().map(|k| k.name().to_string());
                return Ok(out);
            }
        }
        if !full {
            return Ok(out);
        }
    }
}

fn matches(lease: &LeaseInfo, q: &str) -> bool {
    lease.key.name().as_str().to_lowercase().contains(q)
        || lease.holder.as_str().to_lowercase().contains(q)
}

/// The rows of one page in groups, in the order each group first appears, the
/// unnamed group (leases of their own, by session) last; one unnamed group when not
/// grouping. Grouping is per page: a session's members on other pages are not here.
pub(crate) fn grouped(
    rows: &[LeaseInfo],
    grouping: Grouping,
) -> Vec<(Option<String>, Vec<&LeaseInfo>)> {
    let mut groups: Vec<(Option<String>, Vec<&LeaseInfo>)> = Vec::new();
    for row in rows {
        let g = grouping.group_of(row);
        match groups.iter_mut().find(|(name, _)| *name == g) {
            Some((_, members)) => members.push(row),
            None => groups.push((g, vec![row])),
        }
    }
    // Stable: the named groups keep their order.
    groups.sort_by_key(|(name, _)| name.is_none());
    groups
}

/// At most `max` characters of a payload: its text when it is UTF-8 (control
/// characters shown as `·`), else its bytes in hex.
pub(crate) fn preview(payload: &[u8], max: usize) -> String {
    let cut = |s: String, total: usize| {
        if total > max {
            format!("{s}…")
        } else {
            s
        }
    };
    match std::str::from_utf8(payload) {
        Ok(text) => {
            let shown: String = text
                .chars()
                .take(max)
                .map(|c| if c.is_control() { '·' } else { c })
                .collect();
            cut(shown, text.chars().count())
        }
        Err(_) => {
            let shown: String = payload
                .iter()
                .take(max / 2)
                .map(|b| format!("{b:02x}"))
                .collect();
            cut(format!("0x{shown}"), payload.len() * 2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_is_the_holder_without_its_nonce() {
        assert_eq!(process_of("host-a/42#0123456789abcdef"), "host-a/42");
        assert_eq!(process_of("plain"), "plain");
        assert_eq!(process_of("a#b"), "a#b");
    }

    fn lease(name: &str, session: Option<&str>) -> LeaseInfo {
        LeaseInfo::of(
            Key::member(name).unwrap(),
            HolderId::new("h").unwrap(),
            liveness_core::FencingToken(1),
            liveness_core::Ttl::from_secs(1).unwrap(),
            liveness_core::LeaseStatus::Expired,
        )
        .with_session(
            session.map(|s| Key::new(liveness_core::Space::sessions(), Name::new(s).unwrap())),
        )
    }

    #[test]
    fn sessions_group_in_order_and_the_own_leases_come_last() {
        let rows = [
            lease("a", None),
            lease("b", Some("p-2")),
            lease("c", Some("p-1")),
            lease("d", Some("p-2")),
        ];
        let names = |g: Grouping| -> Vec<(Option<String>, Vec<String>)> {
            grouped(&rows, g)
                .into_iter()
                .map(|(g, rows)| (g, rows.iter().map(|r| r.key.name().to_string()).collect()))
                .collect()
        };
        let s = |x: &str| x.to_string();
        assert_eq!(
            names(Grouping::Session),
            [
                (Some(s("p-2")), vec![s("b"), s("d")]),
                (Some(s("p-1")), vec![s("c")]),
                (None, vec![s("a")]),
            ]
        );
        assert_eq!(
            names(Grouping::None),
            [(None, vec![s("a"), s("b"), s("c"), s("d")])]
        );
        assert_eq!(Grouping::parse(None), Grouping::Session);
        assert_eq!(Grouping::parse(Some("none")), Grouping::None);
        assert_eq!(Grouping::Session.as_param(), None);
    }

    #[test]
    fn previews_are_cut_and_binary_is_hex() {
        assert_eq!(preview(b"hello", 10), "hello");
        assert_eq!(preview(b"hello world", 5), "hello…");
        assert_eq!(preview(&[0xff, 0x00], 10), "0xff00");
        assert_eq!(preview(b"a\nb", 10), "a·b");
    }

    #[test]
    fn links_keep_the_view_and_encode() {
        let v = View {
            q: Some("a b&c".into()),
            g: Some("process".into()),
            ..View::default()
        };
        assert_eq!(
            v.link(|v| v.m = Some("x/y".into())),
            "?q=a%20b%26c&m=x%2Fy&g=process"
        );
    }
}
