//! Finding and declaring deaths, and the death history: `expired` (which leases
//! this handle sees as expired) and `next_expiry`, the reap of one entry of
//! `reap_many`, the dead set (`dead_tokens`), the sweep of a dead token's items (one
//! batch of `sweep_many`) and the death records (`deaths`). Each `*_once`
//! is one attempt of a transaction body (or one entry's step of it), run by
//! `transact!` from `lease.rs`, `items.rs`, `operator.rs` or `batch.rs`.
//!
//! A death is recorded by the transaction that ends the lease: it draws the next seq
//! from the namespace's death counter (a read-write, so deaths serialize on it) and
//! clears the record that fell out of the retention window (one clear per death). A
//! sweep (`sweep_many`, in batches) keeps a running tally beside the dead
//! token; the batch that empties the token writes it into the death record.
//!
//! The sweep of a dead SESSION's token first declares its riding members dead, one
//! batch of at most `MAX_BATCH` per transaction (and per `sweep_many` call), read
//! from the session's rider entries `("s", token, …)`: each member's record and rider
//! entry cleared, its token into the dead set and linked (`("Dt", member)`) to the
//! session's death record, whose member count rises by the batch. The session's
//! token stays in the dead set until no rider is left; its items follow.

use std::time::Duration;

use liveness_core::lease::death_page;
use liveness_core::sync::lock;
use liveness_core::{
    DeadToken, DeathCause, DeathRecord, ExpiredLease, FencingToken, HolderId, ItemId, ItemState,
    Key, Name, Space, StoreTime, Sweep, Swept,
};
use tokio::time::Instant;

use crate::core::{ttl_of, Declared, FdbStore, MAX_BATCH};
use crate::error::corrupt;
use crate::keys::{decode_dead, decode_index_value, decode_u64, LeaseRec};
use crate::kv::{Attempt, Fail, RangeRead, Stamp, Transaction};

/// A death record as stored: cause(1) at_us(8) token(8) swept(1 + 8 + 8), for a
/// swept record (flag 2) then members(8), then `space/name`, a newline and the
/// holder. Flag 0: not swept; 1: swept, written before records counted members.
pub(crate) fn encode_death(rec: &DeathRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(match rec.cause {
        DeathCause::Reaped => 0,
        DeathCause::Released => 1,
        DeathCause::Superseded => 2,
    });
    let at = u64::try_from(rec.at.since_epoch().as_micros()).unwrap_or(u64::MAX);
    out.extend_from_slice(&at.to_be_bytes());
    out.extend_from_slice(&rec.token.0.to_be_bytes());
    let swept = rec.swept.unwrap_or_default();
    out.push(if rec.swept.is_some() { 2 } else { 0 });
    out.extend_from_slice(&swept.requeued.to_be_bytes());
    out.extend_from_slice(&swept.dead_lettered.to_be_bytes());
    if rec.swept.is_some() {
        out.extend_from_slice(&swept.members.to_be_bytes());
    }
    out.extend_from_slice(format!("{}\n{}", rec.key, rec.holder).as_bytes());
    out
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

pub(crate) fn decode_death(seq: u64, b: &[u8]) -> Option<DeathRecord> {
    let cause = match b.first()? {
        0 => DeathCause::Reaped,
        1 => DeathCause::Released,
        2 => DeathCause::Superseded,
        _ => return None,
    };
    let at = StoreTime::from_epoch(Duration::from_micros(u64_at(b, 1)?));
    let token = FencingToken(u64_at(b, 9)?);
    let (swept, text_at) = match b.get(17)? {
        0 => (None, 34),
        flag => {
            let members = if *flag == 2 { u64_at(b, 34)? } else { 0 };
            let swept = Swept::new(members, u64_at(b, 18)?, u64_at(b, 26)?);
            (Some(swept), if *flag == 2 { 42 } else { 34 })
        }
    };
    let text = std::str::from_utf8(b.get(text_at..)?).ok()?;
    let (key, holder) = text.split_once('\n')?;
    Some(DeathRecord::new(
        seq,
        Key::parse(key).ok()?,
        HolderId::new(holder).ok()?,
        token,
        at,
        cause,
        swept,
    ))
}

fn encode_tally(s: Swept) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&s.requeued.to_be_bytes());
    out[8..].copy_from_slice(&s.dead_lettered.to_be_bytes());
    out
}

fn decode_tally(b: &[u8]) -> Option<Swept> {
    Some(Swept::new(0, u64_at(b, 0)?, u64_at(b, 8)?))
}

// The death records: written by the transaction that ends a lease, completed by
// the sweep of its token, read back newest first.
impl FdbStore {
    /// Records the death of `rec`'s token on `key` in the transaction that ends it.
    pub(crate) async fn record_death(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        rec: &LeaseRec,
        cause: DeathCause,
    ) -> Result<(), Fail> {
        let seq = self.next_counter(tx, "death").await?;
        let death = DeathRecord::new(
            seq,
            key.clone(),
            rec.holder.clone(),
            rec.token,
            self.store_now(),
            cause,
            None,
        );
        tx.set(&self.layout.death(seq), &encode_death(&death));
        tx.set(&self.layout.death_of(rec.token), &seq.to_be_bytes());
        let keep = u64::try_from(self.info.caps.death_retention.max(1)).unwrap_or(u64::MAX);
        if seq > keep {
            tx.clear(&self.layout.death(seq - keep));
        }
        Ok(())
    }

    /// Adds one sweep batch's moves to `token`'s tally; with the last batch (`done`),
    /// writes the tally into the token's death record and forgets both.
    pub(crate) async fn tally_sweep(
        &self,
        tx: &mut dyn Transaction,
        token: FencingToken,
        moved: &Sweep,
        done: bool,
    ) -> Result<(), Fail> {
        let tally_key = self.layout.death_tally(token);
        let mut tally = match tx.get(&tally_key, false).await? {
            Some(raw) => decode_tally(&raw).ok_or_else(|| Fail::Stop(corrupt("a sweep tally")))?,
            None => Swept::default(),
        };
        tally.requeued += moved.requeued.len() as u64;
        tally.dead_lettered += moved.dead_lettered.len() as u64;
        if !done {
            tx.set(&tally_key, &encode_tally(tally));
            return Ok(());
        }
        tx.clear(&tally_key);
        let of = self.layout.death_of(token);
        let Some(raw) = tx.get(&of, false).await? else {
            return Ok(());
        };
        tx.clear(&of);
        // Cumulative: a session's record also counts its members, and what the sweeps
        // of their tokens (linked to it) moved.
        self.update_swept(tx, decode_u64(&raw)?, |mut swept| {
            swept.requeued += tally.requeued;
            swept.dead_lettered += tally.dead_lettered;
            swept
        })
        .await
    }

    /// Rewrites the sweep figures of death record `seq` with `update` (of the figures
    /// it holds, zero where none yet); nothing where the record is gone.
    pub(crate) async fn update_swept(
        &self,
        tx: &mut dyn Transaction,
        seq: u64,
        update: impl FnOnce(Swept) -> Swept,
    ) -> Result<(), Fail> {
        let rec_key = self.layout.death(seq);
        if let Some(raw) = tx.get(&rec_key, false).await? {
            let mut rec =
                decode_death(seq, &raw).ok_or_else(|| Fail::Stop(corrupt("a death record")))?;
            rec.swept = Some(update(rec.swept.unwrap_or_default()));
            tx.set(&rec_key, &encode_death(&rec));
        }
        Ok(())
    }

    /// `deaths`: the counter, then the page's window of seqs (records are contiguous
    /// by seq), newest first: O(page).
    pub(crate) async fn deaths_once(
        &self,
        tx: &mut dyn Transaction,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<DeathRecord>, Fail> {
        let last = match tx.get(&self.layout.counter("death"), true).await? {
            Some(raw) => decode_u64(&raw)?,
            None => return Ok(Vec::new()),
        };
        let Some((bottom, top)) = death_page(last, before, limit) else {
            return Ok(Vec::new());
        };
        let (b, e) = (self.layout.death(bottom), self.layout.death(top + 1));
        let mut out = Vec::new();
        for (k, v) in tx
            .range(RangeRead::new(&b, &e, limit).snapshot().reverse())
            .await?
        {
            let seq = self.layout.parse_id(&k)?;
            out.push(decode_death(seq, &v).ok_or_else(|| Fail::Stop(corrupt("a death record")))?);
        }
        Ok(out)
    }
}

// Expiry as this handle sees it, and the reaping of what expired.
impl FdbStore {
    /// The distinct ttls of the index of `space`, each with its oldest entry (one
    /// single-row read per ttl group: a skip scan).
    pub(crate) async fn ttl_groups(
        &self,
        tx: &mut dyn Transaction,
        space: &Space,
    ) -> Result<Vec<(u64, Key, Stamp)>, Fail> {
        let (mut cursor, end) = self.layout.index_space(space);
        let mut groups = Vec::new();
        loop {
            let row = tx
                .range(RangeRead::new(&cursor, &end, 1).snapshot())
                .await?;
            let Some((k, _)) = row.first() else {
                break;
            };
            let (ttl_ms, stamp, name) = self.layout.parse_index(k)?;
            let key = Key::new(
                space.clone(),
                Name::new(name).map_err(|_| corrupt("an expiry index entry"))?,
            );
            groups.push((ttl_ms, key, stamp));
            cursor = self.layout.index_after_group(space, ttl_ms);
        }
        Ok(groups)
    }

    pub(crate) async fn expired_once(
        &self,
        tx: &mut dyn Transaction,
        space: &Space,
        limit: usize,
    ) -> Result<Vec<ExpiredLease>, Fail> {
        let now = self.observe(tx).await?;
        let mut found: Vec<(Instant, ExpiredLease)> = Vec::new();
        for (ttl_ms, _, _) in self.ttl_groups(tx, space).await? {
            let ttl = ttl_of(ttl_ms);
            let mark = {
                let mut obs = lock(&self.obs);
                obs.note_ttl(ttl);
                obs.watermark(now, ttl)
            };
            let Some(mark) = mark else {
                continue; // not watched for a whole ttl yet: nothing of this ttl is expired
            };
            let (b, e) = self
                .layout
                .index_group(space, ttl_ms, mark.saturating_add(1));
            for (k, v) in tx.range(RangeRead::new(&b, &e, limit).snapshot()).await? {
                let (_, stamp, name) = self.layout.parse_index(&k)?;
                let key = Key::new(
                    space.clone(),
                    Name::new(name).map_err(|_| corrupt("an expiry index entry"))?,
                );
                let (token, holder) = decode_index_value(&v)?;
                let deadline = lock(&self.obs).deadline(&key, &stamp, ttl).unwrap_or(now);
                found.push((deadline, ExpiredLease::new(key, holder, token)));
            }
        }
        // Leases this handle wrote itself count from their send time.
        let due = lock(&self.obs).own_due(space, now, limit);
        for (key, w) in due {
            match self.read_lease(tx, &key, true).await? {
                Some(rec) if rec.stamp == w.stamp => {
                    if !found.iter().any(|(_, e)| e.key == key) {
                        found.push((
                            w.sent + w.ttl,
                            ExpiredLease::new(key, rec.holder, rec.token),
                        ));
                    }
                }
                _ => lock(&self.obs).forget_stamp(&key, &w.stamp),
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.token.cmp(&b.1.token)));
        found.truncate(limit);
        Ok(found.into_iter().map(|(_, e)| e).collect())
    }

    pub(crate) async fn next_expiry_once(
        &self,
        tx: &mut dyn Transaction,
        space: &Space,
    ) -> Result<Option<Duration>, Fail> {
        let now = self.observe(tx).await?;
        let mut earliest: Option<Instant> = None;
        let mut any = false;
        for (ttl_ms, key, stamp) in self.ttl_groups(tx, space).await? {
            any = true;
            let ttl = ttl_of(ttl_ms);
            let d = {
                let mut obs = lock(&self.obs);
                obs.note_ttl(ttl);
                obs.deadline(&key, &stamp, ttl).unwrap_or(now + ttl)
            };
            earliest = Some(earliest.map_or(d, |e| e.min(d)));
        }
        // Own writes may be known from an earlier instant than the oldest stamp.
        loop {
            let next = lock(&self.obs).own_next(space);
            let Some((key, w)) = next else {
                break;
            };
            match self.read_lease(tx, &key, true).await? {
                Some(rec) if rec.stamp == w.stamp => {
                    any = true;
                    let d = w.sent + w.ttl;
                    earliest = Some(earliest.map_or(d, |e| e.min(d)));
                    break;
                }
                _ => lock(&self.obs).forget_stamp(&key, &w.stamp),
            }
        }
        Ok(if any {
            earliest.map(|d| d.saturating_duration_since(now))
        } else {
            None
        })
    }

    /// One entry of `reap_many`, in the open transaction: declares the lease dead iff
    /// `token` is still on `key` and expired for this handle.
    pub(crate) async fn reap_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        key: &Key,
        token: FencingToken,
        nonce: u64,
    ) -> Result<Declared, Fail> {
        if self.we_declared_dead(tx, at, token, nonce).await? {
            return Ok(Declared::Done(None));
        }
        let now = self.observe(tx).await?;
        let Some(rec) = self.read_lease(tx, key, false).await? else {
            return Ok(Declared::No);
        };
        // A riding member is judged by its session, read with a conflict: a renewal
        // of the session committed in between makes this reap retry.
        if rec.token != token || !self.rec_expired(tx, key, &rec, now, false).await? {
            return Ok(Declared::No);
        }
        self.declare_dead(tx, key, &rec, nonce);
        self.record_death(tx, key, &rec, DeathCause::Reaped).await?;
        Ok(Declared::Done(Some(rec)))
    }

    pub(crate) async fn dead_once(
        &self,
        tx: &mut dyn Transaction,
        limit: usize,
    ) -> Result<Vec<DeadToken>, Fail> {
        let (b, e) = self.layout.dead_all();
        let mut out = Vec::new();
        for (k, v) in tx.range(RangeRead::new(&b, &e, limit).snapshot()).await? {
            let token = self.layout.parse_dead(&k)?;
            let (_, key) = decode_dead(&v)?;
            out.push(DeadToken::new(key, token));
        }
        Ok(out)
    }
}

// The sweep: a dead token's items back to pending (or dead-lettered).
impl FdbStore {
    /// One batch of the sweep of `token` (`sweep_many`), in the open
    /// transaction: `None` when the token is not in the dead set.
    pub(crate) async fn sweep_once(
        &self,
        tx: &mut dyn Transaction,
        token: FencingToken,
    ) -> Result<Option<(Sweep, bool)>, Fail> {
        if tx.get(&self.layout.dead(token), false).await?.is_none() {
            return Ok(None);
        }
        let mut out = Sweep::default();
        // A dead session's riders first, a batch per call declared dead; its token
        // stays in the dead set while any remain.
        let (members, more) = self.sweep_riders(tx, token).await?;
        out.members = members;
        if more {
            return Ok(Some((out, false)));
        }
        let (b, e) = self.layout.owned_by(token);
        let rows = tx.range(RangeRead::new(&b, &e, MAX_BATCH)).await?;
        let done = rows.len() < MAX_BATCH;
        for (k, _) in rows {
            let id = self.layout.parse_id(&k)?;
            match self.read_meta(tx, id, false).await? {
                Some(mut meta) if meta.state == ItemState::Owned(token) => {
                    match self.hand_back(tx, id, &mut meta, true) {
                        ItemState::Pending => out.requeued.push(ItemId(id)),
                        _ => out.dead_lettered.push(ItemId(id)),
                    }
                }
                _ => tx.clear(&k), // a stray index entry
            }
        }
        // The sweep's tally (every batch, whichever sweeper ran it) goes into the
        // token's death record with the last batch.
        self.tally_sweep(tx, token, &out, done).await?;
        if done {
            // The token is forgotten, its claim high-water mark with it.
            tx.clear(&self.layout.dead(token));
            tx.clear(&self.layout.claim_mark(token));
        }
        Ok(Some((out, done)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(swept: Option<Swept>) -> DeathRecord {
        DeathRecord::new(
            3,
            Key::parse("sessions/p").unwrap(),
            HolderId::new("h").unwrap(),
            FencingToken(8),
            StoreTime::from_epoch(Duration::from_micros(5)),
            DeathCause::Reaped,
            swept,
        )
    }

    #[test]
    fn a_death_record_keeps_its_member_count() {
        for swept in [None, Some(Swept::new(2_000, 3, 1))] {
            let rec = record(swept);
            assert_eq!(decode_death(3, &encode_death(&rec)), Some(rec));
        }
        // A record written before records counted members (flag 1) reads as none.
        let mut old = encode_death(&record(None));
        old[17] = 1;
        old[18..26].copy_from_slice(&4u64.to_be_bytes());
        let swept = decode_death(3, &old).unwrap().swept;
        assert_eq!(swept, Some(Swept::new(0, 4, 0)));
    }
}
