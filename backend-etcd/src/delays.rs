//! Held-back items (`EnqueueOptions::delay`, a retry's `after`) on etcd's only clock,
//! the lessor's countdown of etcd leases.
//!
//! An enqueue or a retry that holds items back grants ONE etcd lease of the wait
//! rounded up to whole seconds (at least etcd's minimum ttl), and in its transaction
//! puts a timer key bound to that lease and one held-back entry per item, beside the
//! timer (`item/q/<due>/<group>` and `item/q/<due>/<group>/<id>`, `keys.rs`). etcd
//! deletes the timer when its lease expires: from then on the items are due. `due`
//! is an estimate by the handle's store time that only orders the timers (the
//! earliest first, each right before its items); whether an item is due is decided
//! by the timer's presence alone, so a host clock never makes an item due early.
//!
//! A claim reads the first key under `item/q/` (one range with a limit of 1, in the
//! transaction it reads the pending items with): a timer, or nothing, means nothing
//! needs moving; a held-back item there has lost its timer, so the claim first moves
//! due items to their queues' pending indexes ([`EtcdStore::promote_due`], bounded)
//! and reads again. The move is one transaction guarded by each entry's mod revision and each
//! timer's absence: of concurrent claimers, one moves an item; the others' moves fail
//! and they claim what is pending.
//!
//! A timer lease whose write did not happen (the transaction's compares failed, so
//! nothing was written) is revoked; after a transport error the write may have
//! happened, so the lease is left to expire on its own (a lease that binds nothing
//! is harmless). Items leave `item/q/` only through the move, which needs their timer
//! gone: no completion, sweep or dead-letter retry ever meets a timer.

use std::time::Duration;

use etcd_client::{PutOptions, Txn, TxnOp};
use liveness_core::Result;

use crate::core::{del, mod_rev, put, secs, under, version, EtcdStore};
use crate::error::{at_key, corrupt};
use crate::keys::{Held, Keys, Meta};

/// Keys a claim reads under `item/q/` to find due items: timers and items, a few
/// hundred (the work a claim does for held-back items is bounded by it).
const PROMOTE_SCAN: usize = 256;

/// The most held-back items one claim moves to pending (two writes each, and one
/// compare each plus one per timer: 128 of each at most, etcd's `--max-txn-ops`).
const PROMOTE_MOST: usize = 64;

/// What an answer of `next_due` is when the earliest timer's lease is in its last
/// second (etcd reports whole seconds, truncated: 0): etcd's lessor looks for
/// expired leases every 500 ms.
const LAST_SECOND: Duration = Duration::from_millis(500);

/// The etcd lease that counts down the wait of one call's held-back items, and the
/// estimated due time that orders its timer key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timer {
    /// The etcd lease the timer key is bound to.
    pub(crate) lease: i64,
    /// The estimated due time, ms since the Unix epoch by this handle's store time.
    pub(crate) due: u64,
}

impl EtcdStore {
    /// The etcd lease ttl that holds an item back for `delay`: whole seconds, rounded
    /// UP, and at least etcd's minimum ttl (which etcd would impose anyway).
    pub(crate) fn timer_secs(&self, delay: Duration) -> i64 {
        let min = self.inner.info.caps.min_ttl.as_secs();
        let up = delay.as_nanos().div_ceil(1_000_000_000);
        i64::try_from(up.max(u128::from(min))).unwrap_or(i64::MAX)
    }

    /// Grants the etcd lease that holds items back for `delay`, counted from now.
    pub(crate) async fn arm(&self, delay: Duration) -> Result<Timer> {
        let ttl = self.timer_secs(delay);
        let lease = self.grant_secs(ttl).await?;
        let now = u64::try_from(self.store_now().since_epoch().as_millis()).unwrap_or(u64::MAX);
        let ahead = u64::try_from(ttl).unwrap_or(0).saturating_mul(1000);
        Ok(Timer {
            lease,
            due: now.saturating_add(ahead),
        })
    }

    /// Revokes `timer`'s lease when the write that would have used it surely did not
    /// happen (its transaction's compares failed).
    pub(crate) fn disarm(&self, timer: Option<Timer>) {
        if let Some(t) = timer {
            self.revoke_later(t.lease);
        }
    }

    /// Moves up to [`PROMOTE_MOST`] held-back items whose timer is gone to the
    /// pending index, among the first [`PROMOTE_SCAN`] keys under `item/q/`, in one
    /// transaction guarded by each entry's mod revision and each of their timers'
    /// absence. Answers how many it moved (0 when another claimer moved one first:
    /// the caller claims what is pending then).
    pub(crate) async fn promote_due(&self) -> Result<usize> {
        let k = self.keys();
        let read = self.range(k.helds(), under(PROMOTE_SCAN)).await?;
        // A group's timer sorts right before its items and the read starts at the
        // first key: an item read after no timer of its own has lost it.
        let mut armed = None;
        let mut timers: Vec<(u64, u64)> = Vec::new();
        let mut compares = Vec::new();
        let mut ops = Vec::new();
        for kv in &read {
            let held = k
                .parse_held(kv.key())
                .ok_or_else(|| corrupt(at_key(kv.key())))?;
            let Held::Item { id, .. } = held else {
                armed = Some(held.timer());
                continue;
            };
            if armed == Some(held.timer()) {
                continue;
            }
            if ops.len() >= 2 * PROMOTE_MOST {
                break;
            }
            let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
            let entry = String::from_utf8_lossy(kv.key()).into_owned();
            compares.push(mod_rev(&entry, kv.mod_revision()));
            if !timers.contains(&held.timer()) {
                timers.push(held.timer());
                let (due, group) = held.timer();
                compares.push(version(&k.timer(due, group), 0));
            }
            ops.push(del(&entry));
            ops.push(put(&k.pending(meta.queue, id), meta.encode()));
        }
        if ops.is_empty() {
            return Ok(0);
        }
        let moved = ops.len() / 2;
        let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
        Ok(if resp.succeeded() { moved } else { 0 })
    }

    /// `ItemStore::next_due`: the time etcd reports left on the lease of the earliest
    /// timer by estimate (whole seconds, truncated: a lower bound; its last second
    /// reads as [`LAST_SECOND`]), `None` when no timer is left. Items whose timer is
    /// gone are due already and not looked at, unless the first [`PROMOTE_SCAN`] keys
    /// are all such items: then zero (a claim moves them).
    pub(crate) async fn next_due_in(&self) -> Result<Option<Duration>> {
        let k = self.keys();
        let read = self
            .range(k.helds(), under(PROMOTE_SCAN).with_keys_only())
            .await?;
        let mut timer = None;
        for kv in &read {
            match k.parse_held(kv.key()) {
                Some(Held::Timer { .. }) => {
                    timer = Some(kv.lease());
                    break;
                }
                Some(Held::Item { .. }) => {}
                None => return Err(corrupt(at_key(kv.key()))),
            }
        }
        let Some(lease) = timer else {
            return Ok((read.len() >= PROMOTE_SCAN).then_some(Duration::ZERO));
        };
        Ok(Some(match self.time_to_live(lease).await? {
            // Expired and being deleted now.
            left if left < 0 => Duration::ZERO,
            0 => LAST_SECOND,
            left => secs(left),
        }))
    }
}

/// The writes that hold item `id` (of the group whose first id is `group`, with
/// `meta`) back until `timer`'s lease expires: its entry beside the group's timer.
/// The timer's own put is [`timer_op`], once per group.
pub(crate) fn held_op(k: &Keys, timer: &Timer, group: u64, id: u64, meta: Meta) -> TxnOp {
    put(&k.held(timer.due, group, id), meta.encode())
}

/// The put of the timer key of the group whose first id is `group`, bound to
/// `timer`'s lease.
pub(crate) fn timer_op(k: &Keys, timer: &Timer, group: u64) -> TxnOp {
    TxnOp::put(
        k.timer(timer.due, group),
        "",
        Some(PutOptions::new().with_lease(timer.lease)),
    )
}

/// True when the first key under `item/q/` (a claim reads it with a limit of 1) is a
/// held-back item: its timer, which would sort right before it, is gone, so it is due
/// and waits to be moved to pending. A timer there, or no key, means none does.
pub(crate) fn due_waiting(k: &Keys, first: Option<&etcd_client::KeyValue>) -> Result<bool> {
    let Some(kv) = first else { return Ok(false) };
    match k.parse_held(kv.key()) {
        Some(Held::Item { .. }) => Ok(true),
        Some(Held::Timer { .. }) => Ok(false),
        None => Err(corrupt(at_key(kv.key()))),
    }
}
