//! The warning that no checker runs: a process holding leases in a space looks, now
//! and then, at the expired leases of that space, and says so when one of them is
//! still there, unreaped, a whole period later.
//!
//! Nothing declares a dead member dead, nor requeues its items, unless some process
//! runs a [`Checker`](crate::Checker). A fleet started without one works until the
//! first death, then strands that member's items for ever. So every member with a
//! lease of its own and every session watches its space, one watch per store handle
//! and space in a process:
//!
//! - every period (5 ttl of the first holder, at least 5 s, shortened by a random
//!   part of up to a fifth) it lists up to [`SAMPLE`] expired, unreaped leases
//!   ([`LeaseStore::expired`](crate::LeaseStore::expired): one read, by the store's
//!   clock);
//! - an expired lease (key and token) listed in two looks in a row has stayed
//!   unreaped for a whole period: no checker runs, or the checkers fall that far
//!   behind. The watch then logs a warning, sets the gauge
//!   [`UNREAPED_LEASES`](crate::metrics::UNREAPED_LEASES) to how many it saw, and
//!   sends [`Event::Unreaped`] to each holder's event bus, once, until a look finds
//!   none left over (the gauge goes back to 0, and a line is logged);
//! - while a checker of this process runs on the same store handle over the space, the
//!   watch looks at nothing: a checker is there.
//!
//! A watch costs its store one read per period and process, whatever the number of
//! members, and ends with the last holder that asked for it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::events::{Event, EventBus};
use crate::metrics::{Labels, UNREAPED_LEASES};
use crate::store::Store;
use crate::sync::lock;
use crate::types::{FencingToken, Key, Space, Ttl};

/// How many expired leases a look lists at most.
pub const SAMPLE: usize = 16;

/// The shortest period between two looks.
const MIN_PERIOD: Duration = Duration::from_secs(5);

/// The watches of this process, one per store handle and space, weakly: each ends
/// with its last holder.
static WATCHES: Mutex<Vec<Weak<Watch>>> = Mutex::new(Vec::new());

/// One watch: its store handle (by address) and space, who wants its events, and
/// whether a checker of this process covers it.
#[derive(Debug)]
struct Watch {
    store: usize,
    space: Space,
    holders: Mutex<Holders>,
    /// Checkers of this process over this store handle and space, while they run.
    checkers: Mutex<Vec<Weak<()>>>,
}

/// The holders of a watch, and whether its task runs.
#[derive(Debug, Default)]
struct Holders {
    /// The event buses of the holders, each while its holder lives.
    buses: Vec<(Weak<()>, EventBus)>,
    /// Whether the task that looks runs (it ends when it finds no holder alive).
    looking: bool,
}

impl Watch {
    fn is(&self, store: usize, space: &Space) -> bool {
        self.store == store && &self.space == space
    }

    /// Whether a checker of this process runs over this watch's space.
    fn checked(&self) -> bool {
        let mut checkers = lock(&self.checkers);
        checkers.retain(|c| c.strong_count() > 0);
        !checkers.is_empty()
    }

    /// The buses of the holders still alive; `None` when none is, and then the task
    /// that asked is no longer looking.
    fn buses(&self) -> Option<Vec<EventBus>> {
        let mut holders = lock(&self.holders);
        holders.buses.retain(|(alive, _)| alive.strong_count() > 0);
        holders.looking = !holders.buses.is_empty();
        let buses = holders.buses.iter().map(|(_, bus)| bus.clone());
        holders.looking.then(|| buses.collect())
    }
}

/// A holder's (or a checker's) place in a watch: the watch goes on while one is kept.
#[derive(Clone, Debug)]
pub(crate) struct Watching {
    _alive: Arc<()>,
    _watch: Arc<Watch>,
}

/// The watch of `space` on this `store` handle (started, on the current tokio
/// runtime, when there is none yet), with `events` told of unreaped leases while the
/// answer is kept.
pub(crate) fn watch(
    store: &Arc<dyn Store>,
    space: &Space,
    ttl: Ttl,
    events: &EventBus,
) -> Watching {
    let alive = Arc::new(());
    let watch = find(store, space);
    let mut holders = lock(&watch.holders);
    holders.buses.push((Arc::downgrade(&alive), events.clone()));
    if !holders.looking {
        // The task keeps only a weak reference: the watch ends with its last holder.
        holders.looking = true;
        let period = MIN_PERIOD.max(ttl.duration().saturating_mul(5));
        tokio::spawn(run(Arc::downgrade(&watch), store.clone(), period));
    }
    drop(holders);
    Watching {
        _alive: alive,
        _watch: watch,
    }
}

/// Says that a checker of this process runs over `space` on this `store` handle
/// while the answer is kept: the watch then looks at nothing.
pub(crate) fn checked(store: &Arc<dyn Store>, space: &Space) -> Watching {
    let alive = Arc::new(());
    let watch = find(store, space);
    lock(&watch.checkers).push(Arc::downgrade(&alive));
    Watching {
        _alive: alive,
        _watch: watch,
    }
}

/// The watch of (`store`, `space`), or a new one (that nobody looks for yet).
fn find(store: &Arc<dyn Store>, space: &Space) -> Arc<Watch> {
    let id = Arc::as_ptr(store).cast::<()>() as usize;
    let mut all = lock(&WATCHES);
    all.retain(|w| w.strong_count() > 0);
    if let Some(watch) = all
        .iter()
        .filter_map(Weak::upgrade)
        .find(|w| w.is(id, space))
    {
        return watch;
    }
    let watch = Arc::new(Watch {
        store: id,
        space: space.clone(),
        holders: Mutex::default(),
        checkers: Mutex::default(),
    });
    all.push(Arc::downgrade(&watch));
    watch
}

/// The looks of one watch, every `period` (jittered), until nobody holds it.
async fn run(watch: Weak<Watch>, store: Arc<dyn Store>, period: Duration) {
    let labels = Labels::of(&*store);
    // A generator of its own, so that the watch's jitter leaves the thread's sequence
    // (which seeded tests replay) as it was.
    let mut rng = fastrand::Rng::with_seed(Arc::as_ptr(&store).cast::<()>() as u64);
    let mut last: HashSet<(Key, FencingToken)> = HashSet::new();
    let mut warned = false;
    loop {
        let pause = period.mul_f64(1.0 - rng.f64() / 5.0);
        tokio::time::sleep(pause).await;
        let Some(watch) = watch.upgrade() else { return };
        let Some(buses) = watch.buses() else { return };
        if watch.checked() {
            last.clear();
            continue;
        }
        // A failed look (the store away for a moment) skips one period.
        let Ok(expired) = store.expired(&watch.space, SAMPLE).await else {
            continue;
        };
        let now: HashSet<(Key, FencingToken)> =
            expired.into_iter().map(|e| (e.key, e.token)).collect();
        let left_over = now.intersection(&last).count();
        let gauge = labels.space_gauge(UNREAPED_LEASES, &watch.space);
        if left_over > 0 && !warned {
            warned = true;
            gauge.set(left_over as f64);
            tracing::warn!(
                space = %watch.space,
                leases = left_over,
                period_s = period.as_secs(),
                "expired leases stay unreaped: is a checker running? (a Checker, a Worker, or `liveness check`)"
            );
            let event = Event::Unreaped {
                space: watch.space.clone(),
                leases: left_over,
            };
            buses.iter().for_each(|bus| bus.emit(event.clone()));
        } else if left_over == 0 && warned {
            warned = false;
            gauge.set(0.0);
            tracing::info!(space = %watch.space, "expired leases are reaped again");
        }
        last = now;
    }
}
