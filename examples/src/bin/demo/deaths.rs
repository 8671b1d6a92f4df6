//! The deaths the demo shows, read from the store's death history
//! ([`OperatorStore::deaths`](liveness::store::OperatorStore::deaths)). The store records each
//! death once, in the step that declared it, whichever checker won the reap: the
//! demo's own, or one running beside it on the same store (`liveness check`), which
//! may win every reap. The demo's own checker events only say which deaths it
//! declared itself.

use std::collections::{BTreeMap, HashMap};

use liveness::{DeathCause, DeathRecord, Result, Space, Store, Swept};
use tokio::time::Instant;

use crate::stage::Worker;
use crate::view::{secs, View};

/// How many records one read of the history asks for.
const PAGE: usize = 100;

/// A lease that ended without being released: reaped by a checker, or expired and
/// taken over by a new acquire of its key.
pub struct Death {
    /// Its record's place in the history.
    pub seq: u64,
    /// Its key's name: a worker process's (a session) or a member's.
    pub name: String,
    /// True for a session (a worker process's lease, in the space `sessions`).
    pub session: bool,
    /// The dead token.
    pub token: u64,
    /// Reaped or superseded.
    pub cause: DeathCause,
    /// When the store recorded it, on this process's clock.
    pub at: Instant,
}

/// This run's part of the store's death history.
pub struct Deaths {
    /// The newest record before the demo started: older ones are an earlier run's.
    floor: u64,
    /// This run's records by seq, releases included, read again on every poll so that
    /// their sweep counts arrive.
    records: BTreeMap<u64, DeathRecord>,
    /// The deaths (not releases) in the order the store recorded them.
    pub list: Vec<Death>,
    /// How many times this demo's own checker reported each token dead
    /// (`Event::Died`): the deaths it declared itself.
    pub ours: HashMap<u64, usize>,
}

impl Deaths {
    /// Starts after the newest record the store holds now.
    pub async fn start(store: &dyn Store) -> Result<Deaths> {
        let newest = store.deaths(None, 1).await?;
        Ok(Deaths {
            floor: newest.first().map_or(0, |r| r.seq),
            records: BTreeMap::new(),
            list: Vec::new(),
            ours: HashMap::new(),
        })
    }

    /// Reads this run's records again; returns how many deaths are new (the last ones
    /// of [`Deaths::list`]).
    pub async fn poll(&mut self, store: &dyn Store) -> Result<usize> {
        let (store_now, now) = (store.store_time().await?, Instant::now());
        let mut before = None;
        'pages: loop {
            let page = store.deaths(before, PAGE).await?;
            if page.is_empty() {
                break;
            }
            for record in page {
                if record.seq <= self.floor {
                    break 'pages;
                }
                before = Some(record.seq);
                self.records.insert(record.seq, record);
            }
        }
        let known = self.list.len();
        for record in self.records.values() {
            let seen = self.list.iter().any(|d| d.seq == record.seq);
            if seen || record.cause == DeathCause::Released {
                continue;
            }
            let ago = store_now.saturating_since(record.at);
            self.list.push(Death {
                seq: record.seq,
                name: record.key.name().to_string(),
                session: record.key.space() == &Space::sessions(),
                token: record.token.0,
                cause: record.cause,
                at: now.checked_sub(ago).unwrap_or(now),
            });
        }
        Ok(self.list.len() - known)
    }

    /// What the sweep of a death's token moved, once a checker swept it: for a
    /// session, the members declared dead with it and what their sweeps moved.
    pub fn swept(&self, seq: u64) -> Option<Swept> {
        self.records.get(&seq)?.swept
    }

    /// This run's record of the member `name`'s token `token`, releases included.
    pub fn record_of(&self, name: &str, token: u64) -> Option<&DeathRecord> {
        (self.records.values()).find(|r| {
            r.key.space() == &Space::members()
                && r.key.name().as_str() == name
                && r.token.0 == token
        })
    }

    /// Items sent back to pending by the sweeps of this run's dead tokens, released
    /// ones included.
    pub fn requeued(&self) -> u64 {
        let swept = self.records.values().filter_map(|r| r.swept);
        swept.map(|s| s.requeued).sum()
    }

    /// True when the store recorded each token's death at most once, and this demo's
    /// checker reported each death it declared once.
    pub fn each_once(&self) -> bool {
        let mut per_token: HashMap<u64, usize> = HashMap::new();
        for record in self.records.values() {
            *per_token.entry(record.token.0).or_default() += 1;
        }
        per_token
            .values()
            .chain(self.ours.values())
            .all(|n| *n == 1)
    }
}

/// Reads the store's death history again, and logs the deaths that are new, however
/// they were declared: by this demo's checker, or by one beside it (`liveness
/// check`) that won their reaps.
pub async fn poll_deaths(
    store: &dyn Store,
    deaths: &mut Deaths,
    view: &mut View,
    workers: &[Worker],
) {
    let new = match deaths.poll(store).await {
        Ok(new) => new,
        Err(e) => return view.log(&format!("cannot read the store's death history: {e}")),
    };
    for d in &deaths.list[deaths.list.len() - new..] {
        let staged = workers.iter().find_map(|w| w.fault_of(d));
        let after = staged.map(|(how, at)| {
            let after = secs(d.at.saturating_duration_since(at));
            format!(" {after} after the {how}")
        });
        view.log(&format!(
            "store's death history: {}{} (token {}) DEAD, {}{}{}",
            d.name,
            if d.session { "'s session" } else { "" },
            d.token,
            d.cause,
            after.unwrap_or_default(),
            match d.session {
                true => ": ONE process death; its members follow, each declared once",
                false => "",
            }
        ));
    }
}
