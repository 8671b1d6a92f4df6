//! Finding and declaring deaths, and the death history: `expired` (the expiry watch's
//! candidates, verified), `next_expiry`, a reap on its own, the dead set, the sweep of
//! a dead token's items and the death records (`deaths`).
//!
//! A death is recorded by the transaction that ends the lease (reap, release, an
//! acquire over an expired record): it compares the death counter (`death/ctr`) as it
//! was read and bumps it, so seqs are gapless and follow the order of the deaths; a
//! transaction that lost the counter to another death is retried by its caller. The
//! record that fell out of the retention window is deleted by the same transaction
//! (one delete per death). A sweep (of `sweep_many`, in batches) keeps a
//! running tally next to the dead token, compared and bumped by every batch; its last
//! step writes the tally into the death record and forgets the token, in one
//! transaction.

use std::time::Duration;

use etcd_client::{Compare, DeleteOptions, GetOptions, KeyValue, Txn, TxnOp};
use liveness_core::lease::death_page;
use liveness_core::sync::lock;
use liveness_core::{
    DeadToken, DeathCause, DeathRecord, Error, ExpiredLease, FencingToken, HolderId, ItemId,
    ItemState, Key, Result, Space, StoreTime, Sweep, Swept,
};

use crate::core::{
    counter_at, del, exists, first, first_range, get, mod_rev, number, put, ranges, secs, under,
    version, EtcdStore, Snapshot, MAX_BATCH,
};
use crate::error::{at_key, corrupt, map, Fault, MAX_TRIES};
use crate::keys::{Keys, Meta};
use crate::sweep_members::{MemberSweep, MembersSwept};
use crate::watch::scan;
use crate::BACKEND;

/// The compare and the operations that record one death, to add to the transaction
/// that ends the lease.
pub(crate) struct DeathWrite {
    pub(crate) compare: Compare,
    pub(crate) ops: Vec<TxnOp>,
}

/// A death record as stored: `cause\nat_us\ntoken\nkey\nswept\nholder`, `swept` being
/// `-` or `requeued dead_lettered`, followed by ` members` for a session's record
/// that counts members declared dead with it.
fn encode(rec: &DeathRecord) -> String {
    let cause = match rec.cause {
        DeathCause::Reaped => 0,
        DeathCause::Released => 1,
        DeathCause::Superseded => 2,
    };
    let swept = match rec.swept {
        None => "-".to_owned(),
        Some(s) if s.members == 0 => format!("{} {}", s.requeued, s.dead_lettered),
        Some(s) => format!("{} {} {}", s.requeued, s.dead_lettered, s.members),
    };
    format!(
        "{cause}\n{}\n{}\n{}\n{swept}\n{}",
        rec.at.since_epoch().as_micros(),
        rec.token.0,
        rec.key,
        rec.holder
    )
}

fn decode(seq: u64, raw: &[u8]) -> Option<DeathRecord> {
    let s = std::str::from_utf8(raw).ok()?;
    let mut parts = s.splitn(6, '\n');
    let cause = match parts.next()? {
        "0" => DeathCause::Reaped,
        "1" => DeathCause::Released,
        "2" => DeathCause::Superseded,
        _ => return None,
    };
    let at = StoreTime::from_epoch(Duration::from_micros(parts.next()?.parse().ok()?));
    let token = FencingToken(parts.next()?.parse().ok()?);
    let key = Key::parse(parts.next()?).ok()?;
    let swept = match parts.next()? {
        "-" => None,
        counts => Some(tally(counts.as_bytes())?),
    };
    let holder = HolderId::new(parts.next()?).ok()?;
    Some(DeathRecord::new(seq, key, holder, token, at, cause, swept))
}

/// A sweep tally as stored: `requeued dead_lettered`, and ` members` when a death
/// record counts any.
fn tally(raw: &[u8]) -> Option<Swept> {
    let s = std::str::from_utf8(raw).ok()?;
    let mut parts = s.split(' ');
    let requeued = parts.next()?.parse().ok()?;
    let dead_lettered = parts.next()?.parse().ok()?;
    let members = match parts.next() {
        Some(m) => m.parse().ok()?,
        None => 0,
    };
    if parts.next().is_some() {
        return None;
    }
    Some(Swept::new(members, requeued, dead_lettered))
}

/// The compare on death record `seq` (at `key`) as read in `kv`, and its rewrite with
/// `add` added to its swept counts (a session's record sums its own sweep, its
/// members' sweeps and the count of its members).
pub(crate) fn add_to_record(
    key: &str,
    seq: u64,
    kv: &KeyValue,
    add: Swept,
) -> Result<(Compare, TxnOp)> {
    let mut rec = decode(seq, kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
    let before = rec.swept.unwrap_or_default();
    rec.swept = Some(Swept::new(
        before.members + add.members,
        before.requeued + add.requeued,
        before.dead_lettered + add.dead_lettered,
    ));
    Ok((mod_rev(key, kv.mod_revision()), put(key, encode(&rec))))
}

/// [`add_to_record`] of `members` members declared dead (a step of a session's
/// member sweep).
pub(crate) fn add_members(
    key: &str,
    seq: u64,
    kv: &KeyValue,
    members: u64,
) -> Result<(Compare, TxnOp)> {
    add_to_record(key, seq, kv, Swept::new(members, 0, 0))
}

/// The writes that give back item `id`, owned under the index entry `owned` with
/// `meta`: pending in its own queue when `retry` and it has attempts left,
/// dead-lettered otherwise.
pub(crate) fn hand_back(
    k: &Keys,
    owned: &str,
    id: u64,
    meta: &Meta,
    retry: bool,
) -> (ItemState, [TxnOp; 3]) {
    let (state, index) = if retry && meta.attempts < meta.max_attempts {
        (ItemState::Pending, k.pending(meta.queue, id))
    } else {
        (ItemState::DeadLettered, k.dead_letter(id))
    };
    let ops = [
        del(owned),
        put(&index, meta.encode()),
        put(&k.meta(id), meta.encode_with(state)),
    ];
    (state, ops)
}

/// Plans the hand-back of dead `token`'s owned items, `owned` being their index
/// entries as read: each item's writes ([`hand_back`], retried while it has attempts
/// left) join `ops`, a compare on its entry's mod revision joins `compares` (the
/// transaction fails when a claim's answer or another sweeper moved it meanwhile),
/// and `swept` counts it. Returns where the items go, in id order.
pub(crate) fn plan_hand_backs(
    k: &Keys,
    token: FencingToken,
    owned: &[KeyValue],
    swept: &mut Swept,
    compares: &mut Vec<Compare>,
    ops: &mut Vec<TxnOp>,
) -> Result<Sweep> {
    let mut moved = Sweep::default();
    for kv in owned {
        let id = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(at_key(kv.key())))?;
        let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
        let entry = k.owned(token, id);
        let (state, back) = hand_back(k, &entry, id, &meta, true);
        compares.push(mod_rev(&entry, kv.mod_revision()));
        ops.extend(back);
        match state {
            ItemState::Pending => {
                swept.requeued += 1;
                moved.requeued.push(ItemId(id));
            }
            _ => {
                swept.dead_lettered += 1;
                moved.dead_lettered.push(ItemId(id));
            }
        }
    }
    Ok(moved)
}

/// How long `sync_expiry` waits for a progress notification before it falls back to
/// writing the sync key.
const PROGRESS_WAIT: Duration = Duration::from_millis(500);

/// Candidates verified per read transaction (2 reads each, under 128).
const VERIFY_CHUNK: usize = 64;

impl EtcdStore {
    /// What records the death of `token` (held by `holder` on `key`): the compare on
    /// the death counter as read now, and the writes. The transaction they join
    /// fails when another death was recorded meanwhile; its caller retries.
    pub(crate) async fn death_write(
        &self,
        key: &Key,
        holder: &HolderId,
        token: FencingToken,
        cause: DeathCause,
    ) -> Result<DeathWrite> {
        let k = self.keys();
        let ctr = k.death_ctr();
        let (compare, last) = counter_at(&ctr, self.get_one(&ctr).await?.as_ref())?;
        let seq = last + 1;
        let mut ops = vec![put(&ctr, seq.to_string())];
        ops.extend(self.death_ops(key, holder, token, cause, seq));
        Ok(DeathWrite { compare, ops })
    }

    /// The writes that record death number `seq` (of `token`, held by `holder` on
    /// `key`), except the death counter's own: the record, the token's pointer to
    /// it, and the delete of the record that falls out of the retention window.
    pub(crate) fn death_ops(
        &self,
        key: &Key,
        holder: &HolderId,
        token: FencingToken,
        cause: DeathCause,
        seq: u64,
    ) -> Vec<TxnOp> {
        let k = self.keys();
        let rec = DeathRecord::new(
            seq,
            key.clone(),
            holder.clone(),
            token,
            self.store_now(),
            cause,
            None,
        );
        let mut ops = vec![
            put(&k.death(seq), encode(&rec)),
            put(&k.death_of(token), seq.to_string()),
        ];
        let keep = self.death_keep();
        if seq > keep {
            ops.push(del(&k.death(seq - keep)));
        }
        ops
    }

    /// How many death records the namespace keeps.
    pub(crate) fn death_keep(&self) -> u64 {
        u64::try_from(self.inner.info.caps.death_retention.max(1)).unwrap_or(u64::MAX)
    }

    /// The compare and the value of dead `token`'s sweep tally, as read in `kv`.
    pub(crate) fn sweep_tally(
        &self,
        token: FencingToken,
        kv: Option<&KeyValue>,
    ) -> Result<(Compare, Swept)> {
        let key = self.keys().death_tally(token);
        Ok(match kv {
            None => (version(&key, 0), Swept::default()),
            Some(kv) => (
                mod_rev(&key, kv.mod_revision()),
                tally(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?,
            ),
        })
    }

    /// The write of a sweep batch's new tally.
    pub(crate) fn tally_op(&self, token: FencingToken, swept: Swept) -> TxnOp {
        put(
            &self.keys().death_tally(token),
            format!("{} {}", swept.requeued, swept.dead_lettered),
        )
    }

    /// The last step of a sweep: takes `token` out of the dead set and adds the
    /// tally to its death record, in one transaction guarded by the dead-set entry
    /// and the tally as read (`tally_cmp`). False when the transaction lost a race
    /// (the caller reads again).
    pub(crate) async fn finish_sweep(
        &self,
        token: FencingToken,
        tally_cmp: Compare,
        swept: Swept,
    ) -> Result<bool> {
        let of = self.get_one(&self.keys().death_of(token)).await?;
        let rec = match &of {
            Some(kv) => self.get_one(&self.keys().death(number(kv)?)).await?,
            None => None,
        };
        let (mut compares, mut ops) = self.finish_plan(token, tally_cmp, of.as_ref())?;
        if let (Some(of), Some(rec)) = (&of, &rec) {
            let seq = number(of)?;
            let (c, o) = add_to_record(&self.keys().death(seq), seq, rec, swept)?;
            compares.push(c);
            ops.push(o);
        }
        let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
        Ok(resp.succeeded())
    }

    /// The compares and writes of a sweep's last step (see
    /// [`EtcdStore::finish_sweep`]), given the token's pointer to its death record
    /// (`of`) as read, except the update of that record ([`add_to_record`], which
    /// the caller adds: a session's members' sweeps share their session's record):
    /// at most 3 compares and 5 writes.
    pub(crate) fn finish_plan(
        &self,
        token: FencingToken,
        tally_cmp: Compare,
        of: Option<&KeyValue>,
    ) -> Result<(Vec<Compare>, Vec<TxnOp>)> {
        let k = self.keys();
        let dead = k.dead(token);
        let of_key = k.death_of(token);
        let mut compares = vec![exists(&dead), tally_cmp];
        // The token is forgotten, its claim high-water mark with it, and, for a
        // session's token, its join counter and member-sweep cursor.
        let ops = vec![
            del(&dead),
            del(&k.death_tally(token)),
            del(&of_key),
            del(&k.claim_mark(token)),
            TxnOp::delete(
                k.session_state(token),
                Some(DeleteOptions::new().with_prefix()),
            ),
        ];
        if let Some(seq_kv) = of {
            compares.push(mod_rev(&of_key, seq_kv.mod_revision()));
        }
        Ok((compares, ops))
    }

    /// The death record `death_of` points to (its value is the seq): its key and seq.
    pub(crate) fn death_pointed(&self, of: &KeyValue) -> Result<(String, u64)> {
        let seq = number(of)?;
        Ok((self.keys().death(seq), seq))
    }

    /// `OperatorStore::deaths`: the counter, then the page's window of seqs (records are
    /// contiguous by seq: the oldest ones go first), newest first: O(page).
    pub(crate) async fn death_page(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<DeathRecord>> {
        let k = self.keys();
        let last = match self.get_one(&k.death_ctr()).await? {
            None => return Ok(Vec::new()),
            Some(kv) => number(&kv)?,
        };
        let Some((bottom, top)) = death_page(last, before, limit) else {
            return Ok(Vec::new());
        };
        let opts = GetOptions::new().with_range(k.death(top + 1));
        let mut out = self
            .range(k.death(bottom), opts)
            .await?
            .iter()
            .map(|kv| {
                let seq = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(at_key(kv.key())))?;
                decode(seq, kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))
            })
            .collect::<Result<Vec<_>>>()?;
        out.reverse();
        Ok(out)
    }

    /// One reap on its own (an entry `reap_many` did not settle: a riding member, a
    /// key given twice, contention): declares `token` dead (`key`'s record deleted,
    /// the token into the dead set, with its death record) when `key` still holds it
    /// and its lease-bound key is gone (a riding member: its session's); of
    /// concurrent reapers exactly one wins.
    pub(crate) async fn reap_one(&self, key: &Key, token: FencingToken) -> Result<bool> {
        for _ in 0..MAX_TRIES {
            let seen = self.inner.expiry.generation();
            let snap = self.snapshot(key).await?;
            // A riding member is judged by its session's lease-bound key.
            let live = match snap.rides() {
                Some(_) => snap.is_live(),
                None => snap.live.is_some(),
            };
            let Some(c) = snap.record else {
                self.inner.expiry.forget_upto(key, seen);
                return Ok(false);
            };
            if c.token != token || live {
                return Ok(false);
            }
            let k = self.keys();
            let death = self
                .death_write(key, &c.rec.holder, token, DeathCause::Reaped)
                .await?;
            let mut ops = vec![del(&k.record(key)), put(&k.dead(token), key.to_string())];
            ops.extend(self.unride_ops(key, &c));
            ops.extend(death.ops);
            let mut when = self.expired_guard(key, &c);
            when.push(death.compare);
            let resp = self.txn(Txn::new().when(when).and_then(ops)).await?;
            if resp.succeeded() {
                self.inner.expiry.forget_upto(key, seen);
                return Ok(true);
            }
            // The record changed (another reaper, an acquire), or another death
            // took the counter: read again.
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    /// `ItemStore::dead_tokens`: the dead set, oldest token first.
    pub(crate) async fn dead_set(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let k = self.keys();
        self.range(k.deads(), under(limit))
            .await?
            .into_iter()
            .map(|kv| {
                let token = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(at_key(kv.key())))?;
                let key = std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(|s| Key::parse(s).ok())
                    .ok_or_else(|| corrupt(at_key(kv.key())))?;
                Ok(DeadToken::new(key, FencingToken(token)))
            })
            .collect()
    }

    /// One dead token's sweep on its own (a token `sweep_many` did not
    /// settle in one transaction: a full page of items, a dead session with members
    /// left, a repeat, a lost race): moves dead `token`'s items back to pending (or
    /// to the dead letters), [`MAX_BATCH`] per transaction, each guarded by the
    /// dead-set entry and the items' mod revisions; the last step forgets the token
    /// and adds the tally to its death record. A dead session's token first declares
    /// its riding members dead, one batch per call (`session.rs`), and stays in the
    /// dead set while any remain.
    pub(crate) async fn sweep_one(&self, token: FencingToken) -> Result<Sweep> {
        let k = self.keys();
        let dead = k.dead(token);
        let mut out = Sweep::default();
        let mut conflicts = 0;
        let mut contended = || {
            conflicts += 1;
            if conflicts >= MAX_TRIES {
                return Err(Error::unavailable(BACKEND, Fault::Contention));
            }
            Ok(())
        };
        loop {
            let opts = under(MAX_BATCH);
            let resp = self
                .txn(Txn::new().when(vec![exists(&dead)]).and_then(vec![
                    TxnOp::get(k.owned_by(token), Some(opts)),
                    get(&k.death_tally(token)),
                    MemberSweep::read(k, token),
                    get(&k.death_of(token)),
                ]))
                .await?;
            if !resp.succeeded() {
                // Not (or no longer) in the dead set: nothing to do.
                return Ok(out);
            }
            let r = ranges(&resp);
            let state = MemberSweep::of(k, token, r.get(2).map_or(&[], |g| g.kvs()))?;
            if state.members_left() {
                // A dead session with members left: one batch of them per call.
                if !out.members.is_empty() {
                    return Ok(out);
                }
                match self.sweep_members(token, state, first(r.get(3))).await? {
                    MembersSwept::DeclaredDead(members, more) => {
                        out.members = members;
                        if more && !out.members.is_empty() {
                            return Ok(out);
                        }
                    }
                    MembersSwept::Conflict => contended()?,
                }
                continue;
            }
            let (tally_cmp, mut swept) = self.sweep_tally(token, first(r.get(1)).as_ref())?;
            let owned = first_range(&resp);
            if owned.is_empty() {
                // The last step: forget the token and write what all the batches
                // (of every concurrent sweeper) moved into its death record.
                if !self.finish_sweep(token, tally_cmp, swept).await? {
                    contended()?;
                }
                continue;
            }
            let mut compares = vec![exists(&dead), tally_cmp];
            let mut ops = Vec::with_capacity(owned.len() * 3);
            let moved = plan_hand_backs(k, token, &owned, &mut swept, &mut compares, &mut ops)?;
            ops.push(self.tally_op(token, swept));
            let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
            if resp.succeeded() {
                out.requeued.extend(moved.requeued);
                out.dead_lettered.extend(moved.dead_lettered);
            } else {
                contended()?;
            }
        }
    }

    /// `LeaseStore::next_expiry`: `Some(0)` when a verified expired lease waits,
    /// `None` when the space has no lease-bound key, else the time left of one live
    /// lease.
    pub(crate) async fn next_expiry_in(&self, space: &Space) -> Result<Option<Duration>> {
        self.sync_expiry().await?;
        if !self.verified(space, 1).await?.is_empty() {
            return Ok(Some(Duration::ZERO));
        }
        // One live lease of the space: the one the watch's scan or the last call
        // found, read by its key while it lives; else the first by name. etcd 3.4 serves a range with a
        // limit by walking the range's whole index (O(live leases in the space)):
        // a checker pays that only when its probe lease ended, not every round.
        let probe = lock(&self.inner.expiry.probes).get(space).cloned();
        let kv = match probe {
            Some(key) => self.get_one(&key).await?,
            None => None,
        };
        let kv = match kv {
            Some(kv) => kv,
            None => {
                let first_live = self
                    .range(self.keys().lives_in(space), under(1).with_keys_only())
                    .await?;
                let mut probes = lock(&self.inner.expiry.probes);
                let Some(kv) = first_live.into_iter().next() else {
                    probes.remove(space);
                    return Ok(None);
                };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                probes.insert(space.clone(), key);
                kv
            }
        };
        // The time left of one live lease, at least a second: etcd keeps no expiry
        // index that a client can read, so this is an estimate; the expiry watch
        // wakes the checker the moment etcd expires any lease.
        Ok(Some(match self.time_to_live(kv.lease()).await? {
            left if left < 0 => Duration::ZERO,
            left => secs(left.max(1)),
        }))
    }

    /// Makes sure the expiry watch runs and has delivered every event up to now.
    /// Without writing: the current revision from a read, then a progress
    /// notification of the watch stream. Only when that does not come within
    /// [`PROGRESS_WAIT`] (an old server, a watch being re-created): a write of the
    /// sync key and a wait until the watch saw it. When the watch does not catch up
    /// within the request timeout, a full scan (O(leases)) stands in.
    pub(crate) async fn sync_expiry(&self) -> Result<()> {
        let inner = &self.inner;
        let owed = inner.expiry.checking();
        inner.expiry.ensure(&inner.kv, &inner.watch, &inner.keys);
        if owed {
            // The watch runs since before this handle checked, without candidates:
            // what expired before now is found by one full scan, read after the
            // watch's start (so nothing falls between them).
            // Owed again when the scan fails or this call is dropped mid-way.
            let debt = inner.expiry.owe_scan();
            debt.paid(scan(&inner.kv, &inner.keys).await?);
        }
        let now = inner
            .kv
            .clone()
            .get(
                inner.keys.sync(),
                Some(etcd_client::GetOptions::new().with_count_only()),
            )
            .await
            .map_err(map)?;
        let rev = now.header().map(|h| h.revision()).unwrap_or(0);
        inner.expiry.request_progress();
        if inner
            .expiry
            .caught_up(rev, PROGRESS_WAIT.min(inner.timeout))
            .await
        {
            return Ok(());
        }
        let resp = inner
            .kv
            .clone()
            .put(inner.keys.sync(), "", None)
            .await
            .map_err(map)?;
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        if inner.expiry.caught_up(rev, inner.timeout).await {
            return Ok(());
        }
        tracing::warn!("etcd expiry watch is behind; scanning the namespace instead");
        let found = scan(&inner.kv, &inner.keys).await?;
        inner.expiry.absorb_scan(found);
        Ok(())
    }

    /// Verifies the watch's candidates in `space`, earliest first, forgetting the
    /// stale ones, until `limit` expired leases are found. Costs O(candidates seen).
    pub(crate) async fn verified(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let k = self.keys();
        let mut out = Vec::new();
        let (candidates, seen) = self.inner.expiry.candidates(space);
        for chunk in candidates.chunks(VERIFY_CHUNK / 2) {
            let ops = chunk
                .iter()
                .flat_map(|key| [get(&k.record(key)), get(&k.live(key))])
                .collect::<Vec<_>>();
            let resp = self.txn(Txn::new().and_then(ops)).await?;
            let r = ranges(&resp);
            for (i, key) in chunk.iter().enumerate() {
                let snap = Snapshot::from(first(r.get(2 * i)), first(r.get(2 * i + 1)))?;
                match (&snap.record, &snap.live) {
                    // A riding member is never listed: its session is.
                    (Some(c), None) if c.rec.session.is_none() => {
                        if out.len() < limit {
                            out.push(ExpiredLease::new(
                                key.clone(),
                                c.rec.holder.clone(),
                                c.token,
                            ));
                        }
                    }
                    _ => self.inner.expiry.forget_upto(key, seen),
                }
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}
