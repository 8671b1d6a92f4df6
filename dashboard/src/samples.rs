//! The charts' samples: a small ring of what the store showed, one sample a second.
//!
//! Each sample reads the store's clock, the newest deaths and the first page of
//! members. From them: the deaths per minute; the renewals per second seen on that
//! page (a lease whose expiry moved forward was renewed at least once since the last
//! sample); and, for each member of that page found reaped, how long after its expiry
//! (as last seen) its death was declared: the detection delay beyond expiry.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use liveness_core::{DeathCause, FencingToken, Key, LeaseStatus, Page};

use crate::data::within;
use crate::Shared;

/// How many samples the ring keeps: two minutes at one a second.
pub(crate) const CAPACITY: usize = 120;

/// How many members a sample follows (the first page).
const FOLLOWED: usize = 200;

/// How far an expiry must move forward to count as a renewal: more than the time
/// between the two reads of one sample.
const RENEWAL_STEP: Duration = Duration::from_millis(20);

/// One sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Sample {
    /// Deaths recorded since the previous sample.
    pub deaths: u32,
    /// Seconds since the previous sample (by the store clock).
    pub seconds: f64,
    /// Renewals seen per second since the previous sample.
    pub renewals_per_s: f64,
    /// The longest detection delay beyond expiry among this sample's deaths.
    pub delay: Option<Duration>,
}

/// The ring, shared with the page.
#[derive(Debug, Default)]
pub(crate) struct Ring(Mutex<VecDeque<Sample>>);

impl Ring {
    pub fn push(&self, sample: Sample) {
        let mut ring = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == CAPACITY {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    pub fn all(&self) -> Vec<Sample> {
        let ring = self.0.lock().unwrap_or_else(|e| e.into_inner());
        ring.iter().copied().collect()
    }
}

/// What the sampler remembers between samples.
#[derive(Default)]
struct Memory {
    /// The store time of the previous sample, in seconds.
    at: Option<Duration>,
    /// The newest death seq seen.
    last_seq: Option<u64>,
    /// The followed leases: token and expiry (store time) as last seen.
    expiries: HashMap<Key, (FencingToken, Duration)>,
}

/// Samples until the dashboard is gone.
pub(crate) async fn run(shared: Weak<Shared>) {
    let mut memory = Memory::default();
    loop {
        let every = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if let Some(sample) = take(&shared, &mut memory).await {
                shared.samples.push(sample);
            }
            shared.options.sample_every
        };
        tokio::time::sleep(every.max(Duration::from_millis(100))).await;
    }
}

/// One sample, or `None` when the store did not answer (a gap in the charts).
async fn take(shared: &Shared, memory: &mut Memory) -> Option<Sample> {
    let store = &shared.store;
    let t = shared.options.timeout;
    let now = within(t, store.store_time()).await.ok()?.since_epoch();
    let deaths = within(t, store.deaths(None, 100)).await.ok()?;
    let page = Page {
        after: None,
        limit: FOLLOWED,
    };
    let members = within(t, store.leases(&shared.options.space, page))
        .await
        .ok()?;

    let mut sample = Sample::default();
    let first = memory.at.is_none();
    if let Some(at) = memory.at {
        sample.seconds = now.saturating_sub(at).as_secs_f64();
    }
    memory.at = Some(now);
    for death in deaths
        .iter()
        .filter(|d| memory.last_seq.is_none_or(|seq| d.seq > seq))
    {
        if first {
            break;
        }
        sample.deaths += 1;
        if death.cause != DeathCause::Reaped {
            continue;
        }
        if let Some((token, expiry)) = memory.expiries.get(&death.key) {
            if *token == death.token {
                let delay = death.at.since_epoch().saturating_sub(*expiry);
                sample.delay = Some(sample.delay.map_or(delay, |d| d.max(delay)));
            }
        }
    }
    if let Some(newest) = deaths.first() {
        memory.last_seq = Some(memory.last_seq.map_or(newest.seq, |s| s.max(newest.seq)));
    }
    let mut renewals = 0u32;
    let mut expiries = HashMap::with_capacity(members.len());
    for lease in members {
        let LeaseStatus::Live { remaining } = lease.status else {
            // Expired and not yet reaped: keep the expiry seen while it was live.
            if let Some(seen) = memory.expiries.remove(&lease.key) {
                expiries.insert(lease.key, seen);
            }
            continue;
        };
        let expiry = now + remaining;
        if let Some((token, before)) = memory.expiries.get(&lease.key) {
            if *token == lease.token && expiry > *before + RENEWAL_STEP {
                renewals += 1;
            }
        }
        expiries.insert(lease.key, (lease.token, expiry));
    }
    memory.expiries = expiries;
    if sample.seconds > 0.0 {
        sample.renewals_per_s = f64::from(renewals) / sample.seconds;
    }
    (!first).then_some(sample)
}

/// The deaths per minute over each sample's last minute.
pub(crate) fn deaths_per_minute(samples: &[Sample]) -> Vec<f64> {
    (0..samples.len())
        .map(|i| {
            let mut seconds = 0.0;
            let mut deaths = 0u32;
            for s in samples[..=i].iter().rev() {
                if seconds >= 60.0 {
                    break;
                }
                seconds += s.seconds;
                deaths += s.deaths;
            }
            if seconds > 0.0 {
                f64::from(deaths) * 60.0 / seconds.max(1.0)
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest() {
        let ring = Ring::default();
        for i in 0..(CAPACITY as u32 + 5) {
            ring.push(Sample {
                deaths: i,
                ..Sample::default()
            });
        }
        let all = ring.all();
        assert_eq!(all.len(), CAPACITY);
        assert_eq!(all[0].deaths, 5);
    }

    #[test]
    fn deaths_per_minute_counts_the_last_minute() {
        let one = |deaths| Sample {
            deaths,
            seconds: 30.0,
            ..Sample::default()
        };
        let rates = deaths_per_minute(&[one(3), one(1), one(0)]);
        assert_eq!(rates, vec![6.0, 4.0, 1.0]);
    }
}
