//! `impl OperatorStore for FdbStore`: what the operator reads and does (the
//! handle's clock, the leases of a space, the death history, the items by state,
//! retrying dead letters). Each method runs its transaction body in FoundationDB's
//! retry loop (`transact!`), on input that `liveness_core::CheckInput` already
//! checked (an item id that names no item is refused here). The bodies are here,
//! except that of `deaths` (`deaths.rs`).

use std::collections::HashMap;

use liveness_core::{
    async_trait, DeathRecord, Error, FencingToken, InputProblem, ItemCounts, ItemId, ItemRecord,
    ItemState, ItemStateKind, Key, LeaseInfo, LeaseStatus, Name, OperatorStore, Page, QueueCounts,
    QueueName, Space, StoreTime, Ttl,
};
use tokio::time::Instant;

use crate::core::transact;
use crate::core::{ttl_of, FdbStore};
use crate::error::corrupt;
use crate::keys::{decode_count, Count, LeaseRec};
use crate::kv::{Attempt, Fail, RangeRead, Transaction};

#[async_trait]
impl OperatorStore for FdbStore {
    async fn store_time(&self) -> liveness_core::Result<StoreTime> {
        Ok(self.store_now())
    }

    async fn leases(
        &self,
        space: &Space,
        page: Page<&Key>,
    ) -> liveness_core::Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        Ok(transact!(self.db, |tx, _at| self.leases_once(tx, space, after, limit))?.0)
    }

    async fn deaths(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> liveness_core::Result<Vec<DeathRecord>> {
        Ok(transact!(self.db, |tx, _at| self.deaths_once(tx, before, limit))?.0)
    }

    async fn item_counts(&self) -> liveness_core::Result<ItemCounts> {
        Ok(transact!(self.db, |tx, _at| self.counts_once(tx))?.0)
    }

    async fn queue_counts(&self) -> liveness_core::Result<Vec<QueueCounts>> {
        Ok(transact!(self.db, |tx, _at| self.queue_counts_once(tx))?.0)
    }

    async fn items(
        &self,
        state: ItemStateKind,
        page: Page<ItemId>,
    ) -> liveness_core::Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        Ok(transact!(self.db, |tx, _at| self.items_once(tx, state, after, limit))?.0)
    }

    async fn retry_dead_letter(&self, id: ItemId) -> liveness_core::Result<()> {
        transact!(self.db, |tx, at| self.revive_once(tx, at, id))?;
        Ok(())
    }

    async fn retry_dead_letters(&self, limit: usize) -> liveness_core::Result<Vec<ItemId>> {
        Ok(transact!(self.db, |tx, _at| self.revive_many_once(tx, limit))?.0)
    }

    async fn cancel(&self, id: ItemId) -> liveness_core::Result<Option<ItemState>> {
        Ok(transact!(self.db, |tx, _at| self.cancel_once(tx, id))?.0)
    }
}

// The transaction bodies of the operator's views: one attempt each.
impl FdbStore {
    /// `leases`: a range of lease records in key order, each judged as `inspect`
    /// judges it.
    pub(crate) async fn leases_once(
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
        // Members of one session share its deadline: one read of it per page.
        let mut sessions: HashMap<(Key, FencingToken), Instant> = HashMap::new();
        for (k, v) in tx.range(RangeRead::new(&b, &e, limit).snapshot()).await? {
            let name = Name::new(self.layout.parse_lease(&k)?)
                .map_err(|_| Fail::Stop(corrupt("a lease key")))?;
            let key = Key::new(space.clone(), name);
            let rec = LeaseRec::decode(&v)?;
            let ttl = ttl_of(rec.ttl_ms);
            let deadline = match &rec.session {
                Some(ridden) => match sessions.get(ridden) {
                    Some(d) => *d,
                    None => {
                        let d = self.rec_deadline(tx, &key, &rec, now).await?;
                        sessions.insert(ridden.clone(), d);
                        d
                    }
                },
                None => self.rec_deadline(tx, &key, &rec, now).await?,
            };
            let status = LeaseStatus::with_remaining(deadline.saturating_duration_since(now));
            let ttl = Ttl::new(ttl).map_err(|_| corrupt("the ttl of a lease record"))?;
            let session = rec.session.map(|(k, _)| k);
            out.push(LeaseInfo::of(key, rec.holder, rec.token, ttl, status).with_session(session));
        }
        Ok(out)
    }

    pub(crate) async fn counts_once(&self, tx: &mut dyn Transaction) -> Result<ItemCounts, Fail> {
        let mut c = [0u64; 3];
        for (i, which) in [Count::Pending, Count::Owned, Count::Dead]
            .into_iter()
            .enumerate()
        {
            if let Some(raw) = tx.get(&self.layout.count(which), false).await? {
                c[i] = decode_count(&raw);
            }
        }
        Ok(ItemCounts::new(c[0], c[1], c[2]))
    }

    /// `queue_counts`: the totals and every other queue's counters, in one
    /// transaction; the default queue's counts are the totals less the other
    /// queues' (so items written before queues existed count as the default's).
    /// Reads 3 keys and one row per count of a queue other than the default that
    /// ever held an item (a counter back at zero stays: its queue is then left out).
    pub(crate) async fn queue_counts_once(
        &self,
        tx: &mut dyn Transaction,
    ) -> Result<Vec<QueueCounts>, Fail> {
        let total = self.counts_once(tx).await?;
        let (b, e) = self.layout.queue_counts_all();
        let mut queues: Vec<(QueueName, ItemCounts)> = Vec::new();
        let mut rest = total;
        for (k, v) in tx.range(RangeRead::new(&b, &e, usize::MAX)).await? {
            let (queue, which) = self.layout.parse_queue_count(&k)?;
            let n = decode_count(&v);
            let at = match queues.iter().position(|(q, _)| *q == queue) {
                Some(at) => at,
                None => {
                    queues.push((queue, ItemCounts::default()));
                    queues.len() - 1
                }
            };
            let (mine, left) = match which {
                Count::Pending => (&mut queues[at].1.pending, &mut rest.pending),
                Count::Owned => (&mut queues[at].1.owned, &mut rest.owned),
                Count::Dead => (&mut queues[at].1.dead_lettered, &mut rest.dead_lettered),
            };
            *mine = n;
            *left = left.saturating_sub(n);
        }
        queues.push((QueueName::DEFAULT, rest));
        queues.retain(|(_, c)| *c != ItemCounts::default());
        queues.sort_by(|(a, _), (b, _)| a.as_str().cmp(b.as_str()));
        Ok(queues
            .into_iter()
            .map(|(q, c)| QueueCounts::new(q, c))
            .collect())
    }

    /// The ids of the first `limit` dead-lettered items, lowest first.
    async fn dead_letter_ids(
        &self,
        tx: &mut dyn Transaction,
        limit: usize,
    ) -> Result<Vec<u64>, Fail> {
        let (b, e) = self.layout.dead_letters_all();
        let keys = tx.range(RangeRead::new(&b, &e, limit)).await?;
        let ids = keys.iter().map(|(k, _)| self.layout.parse_id(k));
        Ok(ids.collect::<Result<_, _>>()?)
    }

    /// `items`: the state's index from `after` (pending while every pending item is
    /// in the default queue, dead-lettered), or the item metas from `after` (owned:
    /// there is no index by id; pending with items in other queues, whose indexes
    /// are by queue), read in one transaction.
    pub(crate) async fn items_once(
        &self,
        tx: &mut dyn Transaction,
        state: ItemStateKind,
        after: Option<ItemId>,
        limit: usize,
    ) -> Result<Vec<ItemRecord>, Fail> {
        let first_id = after.map_or(0, |a| a.0.saturating_add(1));
        let which = match state {
            ItemStateKind::Pending => {
                let (b, e) = self.layout.pending_named();
                let named = tx.range(RangeRead::new(&b, &e, 1).snapshot()).await?;
                if named.is_empty() {
                    "p"
                } else {
                    "i"
                }
            }
            ItemStateKind::DeadLettered => "x",
            ItemStateKind::Owned => "i",
        };
        let walk = which == "i";
        let (mut b, e) = self.layout.ids_from(which, first_id);
        let mut out = Vec::new();
        loop {
            let batch = if walk { 256 } else { limit };
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
                Some((k, _)) if walk && rows.len() == batch => {
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

    /// `cancel`: removes a pending or dead-lettered item; an owned one is left to its
    /// owner. After an unknown commit result a repeat finds the item gone and
    /// answers `None`, as a repeated call would.
    pub(crate) async fn cancel_once(
        &self,
        tx: &mut dyn Transaction,
        id: ItemId,
    ) -> Result<Option<ItemState>, Fail> {
        let Some(meta) = self.read_meta(tx, id.0, false).await? else {
            return Ok(None);
        };
        match meta.state {
            ItemState::Owned(_) => return Ok(Some(meta.state)),
            ItemState::Pending => tx.clear(&self.layout.pending(meta.queue, id.0)),
            ItemState::DeadLettered => tx.clear(&self.layout.dead_letter(id.0)),
        }
        tx.clear(&self.layout.item(id.0));
        tx.clear(&self.layout.payload(id.0));
        tx.clear(&self.layout.error(id.0));
        self.count_add(tx, meta.queue, Count::of(meta.state), -1);
        Ok(Some(meta.state))
    }

    /// `retry_dead_letters`: the lowest dead-lettered items back to pending.
    pub(crate) async fn revive_many_once(
        &self,
        tx: &mut dyn Transaction,
        limit: usize,
    ) -> Result<Vec<ItemId>, Fail> {
        let mut out = Vec::new();
        for id in self.dead_letter_ids(tx, limit).await? {
            if let Some(mut meta) = self.read_meta(tx, id, false).await? {
                meta.attempts = 0;
                self.move_item(tx, id, &mut meta, ItemState::Pending, &[]);
                out.push(ItemId(id));
            }
        }
        Ok(out)
    }
}
