//! Observer-local expiry: what this handle has seen, on its own monotonic clock.
//!
//! FoundationDB has no clock to expire leases by, so each handle judges expiry from
//! its own observations (see the crate README for the whole argument):
//!
//! - **Checkpoints.** Every transaction attempt reads its read version `rv`, and the
//!   handle notes `(t, rv)` with `t` = its monotonic clock right AFTER the read version
//!   arrived. Every stamp with commit version ≤ `rv` was committed before `t`: the
//!   handle has "seen" it by `t`, whether or not it read that lease.
//! - **Own writes.** When this handle acquires or renews, it knows the stamp it wrote
//!   and the instant `sent` it started the call (before the commit, so earlier than
//!   any other observer can have seen the stamp).
//! - `first_known(stamp)` = `sent` for its own current write, else the earliest
//!   checkpoint whose `rv` covers the stamp. A lease is expired for this handle once
//!   `now ≥ first_known + ttl` and its stamp is still the same (a renew writes a new,
//!   higher stamp; a stamp never comes back). Callers confirm "still the same" in the
//!   transaction that acts, whose read conflict on the record makes it atomic.
//!
//! Memory: checkpoints are bucketed (one kept per bucket of `gap` = the smallest ttl
//! seen / 64, at least 1 ms, at most 65,536 buckets over the longest ttl seen), and
//! dropped once older than the longest ttl seen. Bucketing can only make
//! `first_known` later (by at most one bucket), never earlier: expiry may be declared
//! up to `gap` late, never early.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use liveness_core::Key;
use tokio::time::Instant;

use crate::kv::{stamp_version, Stamp};

#[derive(Debug, Clone, Copy)]
struct Checkpoint {
    bucket_start: Instant,
    at: Instant,
    rv: u64,
}

/// A lease this handle wrote last.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub(crate) stamp: Stamp,
    pub(crate) sent: Instant,
    pub(crate) ttl: Duration,
}

#[derive(Debug)]
pub(crate) struct Observer {
    epoch: Instant,
    checkpoints: VecDeque<Checkpoint>,
    written: HashMap<Key, Written>,
    /// `(sent + ttl, key)` of every entry in `written`.
    deadlines: BTreeSet<(Instant, Key)>,
    min_ttl: Option<Duration>,
    max_ttl: Duration,
}

impl Observer {
    pub(crate) fn new() -> Self {
        Observer {
            epoch: Instant::now(),
            checkpoints: VecDeque::new(),
            written: HashMap::new(),
            deadlines: BTreeSet::new(),
            min_ttl: None,
            max_ttl: Duration::ZERO,
        }
    }

    /// The handle's monotonic time since it was made.
    pub(crate) fn since_epoch(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.epoch)
    }

    /// Notes a ttl in use (sizes the checkpoint buckets and retention).
    pub(crate) fn note_ttl(&mut self, ttl: Duration) {
        self.min_ttl = Some(self.min_ttl.map_or(ttl, |m| m.min(ttl)));
        self.max_ttl = self.max_ttl.max(ttl);
    }

    fn gap(&self) -> Duration {
        let by_min = self.min_ttl.unwrap_or(Duration::ZERO) / 64;
        let by_max = self.max_ttl / 65_536;
        by_min.max(by_max).max(Duration::from_millis(1))
    }

    /// Records that at `at` (just after it arrived) the read version was `rv`.
    pub(crate) fn checkpoint(&mut self, at: Instant, rv: u64) {
        let gap = self.gap();
        let rv = self.checkpoints.back().map_or(rv, |c| c.rv.max(rv));
        match self.checkpoints.back_mut() {
            Some(last) if at < last.bucket_start + gap => {
                if at >= last.at {
                    last.at = at;
                    last.rv = rv;
                }
            }
            _ => self.checkpoints.push_back(Checkpoint {
                bucket_start: at,
                at,
                rv,
            }),
        }
        // Keep one checkpoint at or before `at - max_ttl`, drop the older ones.
        if let Some(horizon) = at.checked_sub(self.max_ttl + gap) {
            while self.checkpoints.len() > 1 && self.checkpoints[1].at <= horizon {
                self.checkpoints.pop_front();
            }
        }
    }

    /// The earliest instant this handle knows `stamp` was current on `key`.
    pub(crate) fn first_known(&self, key: &Key, stamp: &Stamp) -> Option<Instant> {
        if let Some(w) = self.written.get(key) {
            if &w.stamp == stamp {
                return Some(w.sent);
            }
        }
        let v = stamp_version(stamp);
        let i = self.checkpoints.partition_point(|c| c.rv < v);
        self.checkpoints.get(i).map(|c| c.at)
    }

    /// The lease's deadline for this handle: `first_known + ttl`.
    pub(crate) fn deadline(&self, key: &Key, stamp: &Stamp, ttl: Duration) -> Option<Instant> {
        self.first_known(key, stamp).map(|t| t + ttl)
    }

    /// True when the stamp has stood for a whole ttl as seen by this handle.
    pub(crate) fn is_expired(&self, key: &Key, stamp: &Stamp, ttl: Duration, now: Instant) -> bool {
        self.deadline(key, stamp, ttl).is_some_and(|d| now >= d)
    }

    /// Every stamp with a commit version ≤ the returned version has stood since
    /// `now - ttl` or earlier: the highest read version checkpointed at or before
    /// `now - ttl`. `None` when this handle has not watched that long.
    pub(crate) fn watermark(&self, now: Instant, ttl: Duration) -> Option<u64> {
        let cut = now.checked_sub(ttl)?;
        let i = self.checkpoints.partition_point(|c| c.at <= cut);
        i.checked_sub(1).map(|i| self.checkpoints[i].rv)
    }

    /// Records this handle's own write of `stamp` on `key`.
    pub(crate) fn wrote(&mut self, key: &Key, stamp: Stamp, sent: Instant, ttl: Duration) {
        self.forget(key);
        self.note_ttl(ttl);
        self.deadlines.insert((sent + ttl, key.clone()));
        self.written
            .insert(key.clone(), Written { stamp, sent, ttl });
    }

    /// Forgets this handle's write on `key` (released, reaped, superseded).
    pub(crate) fn forget(&mut self, key: &Key) {
        if let Some(w) = self.written.remove(key) {
            self.deadlines.remove(&(w.sent + w.ttl, key.clone()));
        }
    }

    /// Forgets the write on `key` only if it is of `stamp`.
    pub(crate) fn forget_stamp(&mut self, key: &Key, stamp: &Stamp) {
        if self.written.get(key).is_some_and(|w| &w.stamp == stamp) {
            self.forget(key);
        }
    }

    /// Own writes in `space` whose deadline is at or before `now`, earliest first.
    pub(crate) fn own_due(
        &self,
        space: &liveness_core::Space,
        now: Instant,
        limit: usize,
    ) -> Vec<(Key, Written)> {
        self.deadlines
            .iter()
            .take_while(|(d, _)| *d <= now)
            .filter(|(_, k)| k.space() == space)
            .take(limit)
            .filter_map(|(_, k)| self.written.get(k).map(|w| (k.clone(), w.clone())))
            .collect()
    }

    /// The earliest own-write deadline in `space`.
    pub(crate) fn own_next(&self, space: &liveness_core::Space) -> Option<(Key, Written)> {
        self.deadlines
            .iter()
            .find(|(_, k)| k.space() == space)
            .and_then(|(_, k)| self.written.get(k).map(|w| (k.clone(), w.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(v: u64) -> Stamp {
        let mut s = [0u8; 10];
        s[..8].copy_from_slice(&v.to_be_bytes());
        s
    }

    #[tokio::test(start_paused = true)]
    async fn first_known_is_the_first_covering_checkpoint() {
        let key = Key::member("a").unwrap();
        let mut o = Observer::new();
        o.note_ttl(Duration::from_secs(1));
        let t0 = Instant::now();
        o.checkpoint(t0, 10);
        tokio::time::advance(Duration::from_millis(100)).await;
        let t1 = Instant::now();
        o.checkpoint(t1, 20);
        assert_eq!(o.first_known(&key, &stamp(5)), Some(t0));
        assert_eq!(o.first_known(&key, &stamp(15)), Some(t1));
        assert_eq!(o.first_known(&key, &stamp(25)), None, "never seen");
        // A fresh observer has no watermark until it watched for one ttl.
        assert_eq!(o.watermark(t1, Duration::from_secs(1)), None);
        assert_eq!(
            o.watermark(t0 + Duration::from_secs(1), Duration::from_secs(1)),
            Some(10)
        );
        assert!(o.is_expired(
            &key,
            &stamp(15),
            Duration::from_secs(1),
            t1 + Duration::from_secs(1)
        ));
        assert!(!o.is_expired(
            &key,
            &stamp(15),
            Duration::from_secs(1),
            t0 + Duration::from_secs(1)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn own_writes_count_from_the_send_time() {
        let key = Key::member("a").unwrap();
        let mut o = Observer::new();
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(50)).await;
        o.checkpoint(Instant::now(), 100);
        o.wrote(&key, stamp(90), sent, Duration::from_secs(1));
        assert_eq!(o.first_known(&key, &stamp(90)), Some(sent));
        assert_eq!(
            o.own_due(key.space(), sent + Duration::from_secs(1), 10)
                .len(),
            1
        );
        o.forget_stamp(&key, &stamp(91));
        assert!(o.own_next(key.space()).is_some());
        o.forget_stamp(&key, &stamp(90));
        assert!(o.own_next(key.space()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn buckets_never_make_expiry_earlier_and_stay_bounded() {
        let key = Key::member("a").unwrap();
        let mut o = Observer::new();
        let ttl = Duration::from_millis(640); // gap 10 ms
        o.note_ttl(ttl);
        let start = Instant::now();
        for v in 1..=10_000u64 {
            o.checkpoint(Instant::now(), v);
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        // Stamp v was seen at the earliest at start + (v-1) ms.
        for v in [1u64, 500, 5_000, 9_999] {
            if let Some(t) = o.first_known(&key, &stamp(v)) {
                assert!(t >= start + Duration::from_millis(v - 1));
            }
        }
        assert!(o.checkpoints.len() <= 2 + (ttl.as_millis() / 10) as usize + 2);
    }
}
