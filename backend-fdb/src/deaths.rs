//! The operator's read paths on FoundationDB: the death history and its sweep
//! counts, the member listing, items by state and the dead-letter retries. Each
//! `*_once` is one attempt of a transaction, as in `ops.rs`.
//!
//! A death is recorded by the transaction that ends the lease: it draws the next seq
//! from the namespace's death counter (a read-write, so deaths serialize on it) and
//! clears the record that fell out of the retention window (one clear per death). A
//! sweep (`requeue_orphans`, in batches) keeps a running tally beside the dead token;
//! the batch that empties the token writes it into the death record.

use std::time::Duration;

use liveness_core::lease::death_page;
use liveness_core::sync::lock;
use liveness_core::{
    DeathCause, DeathRecord, Error, FencingToken, HolderId, InputProblem, ItemId, ItemRecord,
    ItemState, ItemStateKind, Key, LeaseInfo, LeaseStatus, Name, Requeued, Space, StoreTime, Swept,
    Ttl,
};
use tokio::time::Instant;

use crate::error::corrupt;
use crate::keys::{decode_u64, LeaseRec};
use crate::kv::{Attempt, Fail, RangeRead, Transaction};
use crate::ops::ttl_of;
use crate::store::FdbStore;

/// A death record as stored: cause(1) at_us(8) token(8) swept(1 + 8 + 8), then
/// `space/name`, a newline and the holder.
fn encode(rec: &DeathRecord) -> Vec<u8> {
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
    out.push(u8::from(rec.swept.is_some()));
    out.extend_from_slice(&swept.requeued.to_be_bytes());
    out.extend_from_slice(&swept.dead_lettered.to_be_bytes());
    out.extend_from_slice(format!("{}\n{}", rec.key, rec.holder).as_bytes());
    out
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn decode(seq: u64, b: &[u8]) -> Option<DeathRecord> {
    let cause = match b.first()? {
        0 => DeathCause::Reaped,
        1 => DeathCause::Released,
        2 => DeathCause::Superseded,
        _ => return None,
    };
    let at = StoreTime::from_epoch(Duration::from_micros(u64_at(b, 1)?));
    let token = FencingToken(u64_at(b, 9)?);
    let swept = match b.get(17)? {
        0 => None,
        _ => Some(Swept {
            requeued: u64_at(b, 18)?,
            dead_lettered: u64_at(b, 26)?,
        }),
    };
    let text = std::str::from_utf8(b.get(34..)?).ok()?;
    let (key, holder) = text.split_once('\n')?;
    Some(DeathRecord {
        seq,
        key: Key::parse(key).ok()?,
        holder: HolderId::new(holder).ok()?,
        token,
        at,
        cause,
        swept,
    })
}

fn encode_tally(s: Swept) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&s.requeued.to_be_bytes());
    out[8..].copy_from_slice(&s.dead_lettered.to_be_bytes());
    out
}

fn decode_tally(b: &[u8]) -> Option<Swept> {
    Some(Swept {
        requeued: u64_at(b, 0)?,
        dead_lettered: u64_at(b, 8)?,
    })
}

impl FdbStore {
    /// The handle's store time: its own monotonic clock, anchored at the Unix epoch
    /// by the host clock read once when the handle was made (for diagnostics and
    /// death records; expiry never uses it).
    pub(crate) fn store_now(&self) -> StoreTime {
        StoreTime::from_epoch(self.wall_at_start + lock(&self.obs).since_epoch(Instant::now()))
    }

    /// Records the death of `rec`'s token on `key` in the transaction that ends it.
    pub(crate) async fn record_death(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        rec: &LeaseRec,
        cause: DeathCause,
    ) -> Result<(), Fail> {
        let seq = self.next_counter(tx, "death").await?;
        let death = DeathRecord {
            seq,
            key: key.clone(),
            holder: rec.holder.clone(),
            token: rec.token,
            at: self.store_now(),
            cause,
            swept: None,
        };
        tx.set(&self.layout.death(seq), &encode(&death));
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
        moved: &Requeued,
        done: bool,
    ) -> Result<(), Fail> {
        let tally_key = self.layout.death_tally(token);
        let mut tally = match tx.get(&tally_key, false).await? {
            Some(raw) => decode_tally(&raw).ok_or_else(|| Fail::Stop(corrupt("sweep tally")))?,
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
        let seq = decode_u64(&raw)?;
        let rec_key = self.layout.death(seq);
        if let Some(raw) = tx.get(&rec_key, false).await? {
            let mut rec = decode(seq, &raw).ok_or_else(|| Fail::Stop(corrupt("death record")))?;
            rec.swept = Some(tally);
            tx.set(&rec_key, &encode(&rec));
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
            out.push(decode(seq, &v).ok_or_else(|| Fail::Stop(corrupt("death record")))?);
        }
        Ok(out)
    }

    /// `members`: a range of lease records in key order, each judged as `inspect`
    /// judges it.
    pub(crate) async fn members_once(
        &self,
        tx: &mut dyn Transaction,
        space: &Space,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<LeaseInfo>, Fail> {
        let now = self.observe(tx).await?;
        let (b, e) = self
            .layout
            .leases_after(space, after.map(|k| k.name().as_str()));
        let mut out = Vec::new();
        for (k, v) in tx.range(RangeRead::new(&b, &e, limit).snapshot()).await? {
            let name = Name::new(self.layout.parse_lease(&k)?)
                .map_err(|_| Fail::Stop(corrupt("lease key")))?;
            let key = Key::new(space.clone(), name);
            let rec = LeaseRec::decode(&v)?;
            let ttl = ttl_of(rec.ttl_ms);
            let deadline = {
                let mut obs = lock(&self.obs);
                obs.note_ttl(ttl);
                obs.deadline(&key, &rec.stamp, ttl).unwrap_or(now + ttl)
            };
            let status = if now < deadline {
                LeaseStatus::Live {
                    remaining: deadline - now,
                }
            } else {
                LeaseStatus::Expired
            };
            out.push(LeaseInfo {
                key,
                holder: rec.holder,
                token: rec.token,
                ttl: Ttl::new(ttl).map_err(|_| corrupt("lease ttl"))?,
                status,
            });
        }
        Ok(out)
    }

    /// `items`: the state's index from `after` (pending, dead-lettered), or the item
    /// metas from `after` (owned: there is no index by id), read in one transaction.
    pub(crate) async fn items_once(
        &self,
        tx: &mut dyn Transaction,
        state: ItemStateKind,
        after: Option<ItemId>,
        limit: usize,
    ) -> Result<Vec<ItemRecord>, Fail> {
        let first_id = after.map_or(0, |a| a.0.saturating_add(1));
        let which = match state {
            ItemStateKind::Pending => "p",
            ItemStateKind::DeadLettered => "x",
            ItemStateKind::Owned => "i",
        };
        let (mut b, e) = self.layout.ids_from(which, first_id);
        let mut out = Vec::new();
        loop {
            let batch = if state == ItemStateKind::Owned {
                256
            } else {
                limit
            };
            let rows = tx.range(RangeRead::new(&b, &e, batch).snapshot()).await?;
            for (k, _) in &rows {
                let id = self.layout.parse_id(k)?;
                if let Some(rec) = self.read_record(tx, id).await? {
                    if rec.state.kind() == state {
                        out.push(rec);
                        if out.len() == limit {
                            return Ok(out);
                        }
                    }
                }
            }
            match rows.last() {
                Some((k, _)) if state == ItemStateKind::Owned && rows.len() == batch => {
                    b = k.clone();
                    b.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// `retry_dead_letter`: one item back to pending with no attempts.
    pub(crate) async fn revive_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        id: ItemId,
    ) -> Result<(), Fail> {
        let Some(mut meta) = self.read_meta(tx, id.0, false).await? else {
            return Err(Fail::Stop(Error::invalid("item", InputProblem::NoSuchItem)));
        };
        if meta.state != ItemState::DeadLettered {
            // After an unknown commit result, pending with no attempts is our own
            // earlier attempt's work.
            if at.maybe_committed && meta.state == ItemState::Pending && meta.attempts == 0 {
                return Ok(());
            }
            return Err(Fail::Stop(Error::invalid(
                "item",
                InputProblem::NotDeadLettered,
            )));
        }
        meta.attempts = 0;
        self.move_item(tx, id.0, &mut meta, ItemState::Pending, &[]);
        Ok(())
    }

    /// `retry_dead_letters`: the lowest dead-lettered items back to pending.
    pub(crate) async fn revive_many_once(
        &self,
        tx: &mut dyn Transaction,
        limit: usize,
    ) -> Result<Vec<ItemId>, Fail> {
        let (b, e) = self.layout.dead_letters_all();
        let mut out = Vec::new();
        for (k, _) in tx.range(RangeRead::new(&b, &e, limit)).await? {
            let id = self.layout.parse_id(&k)?;
            if let Some(mut meta) = self.read_meta(tx, id, false).await? {
                meta.attempts = 0;
                self.move_item(tx, id, &mut meta, ItemState::Pending, &[]);
                out.push(ItemId(id));
            }
        }
        Ok(out)
    }
}
