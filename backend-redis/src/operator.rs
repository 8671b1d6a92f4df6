//! `impl OperatorStore for RedisStore`: the operator's views (the server clock, the
//! leases of a space, the death history, the items by state and by queue, retrying
//! dead letters), each its own script declared next to it, or the death history of
//! `deaths.rs`. The input arrives checked (the core's `CheckInput`); the store still
//! refuses what only it can judge (an item id that names no dead-lettered item).

use std::time::Duration;

use liveness_core::{
    async_trait, DeathRecord, Error, InputProblem, ItemCounts, ItemId, ItemRecord, ItemState,
    ItemStateKind, Key, LeaseInfo, Name, OperatorStore, Page, QueueCounts, QueueName, Result,
    Space, StoreTime,
};
use redis::Value;

use crate::core::{array, ids, int, scripts, text, uint, unexpected, RedisStore};
use crate::items::{item_record, item_state};
use crate::lease::lease_info;

scripts! {
    STORE_TIME = "store_time", LEASES = "leases", ITEM_COUNTS = queues "item_counts",
    ITEMS = queues "items", RETRY_DEAD_LETTER = queues "retry_dead_letter",
    RETRY_DEAD_LETTERS = queues "retry_dead_letters", CANCEL = queues dead_letters "cancel",
    QUEUE_COUNTS = queues "queue_counts",
}

#[async_trait]
impl OperatorStore for RedisStore {
    async fn store_time(&self) -> Result<StoreTime> {
        // The counter key only routes the call to the namespace's node on a cluster
        // (each node has its own clock); the script reads no key.
        let mut call = STORE_TIME.prepare_invoke();
        call.key(self.keys.tokens());
        let now = uint("store_time", &self.run(call).await?)?;
        Ok(self.high_water.observe(Duration::from_micros(now)))
    }

    async fn leases(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let mut call = LEASES.prepare_invoke();
        call.key(self.keys.leases(space))
            .arg(after.map_or_else(|| "-".to_owned(), |k| format!("({}", k.name())))
            .arg(limit)
            .arg(self.keys.lease_prefix(space));
        let flat = array("leases", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 6);
        let mut it = flat.into_iter();
        while let Some(name) = it.next() {
            let name = Name::new(text("leases", name)?)
                .map_err(|_| unexpected("leases", "an invalid stored name"))?;
            out.push(lease_info(
                "leases",
                &self.keys,
                Key::new(space.clone(), name),
                &mut it,
            )?);
        }
        Ok(out)
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.death_records(before, limit).await
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let mut call = ITEM_COUNTS.prepare_invoke();
        call.key(self.keys.pending())
            .key(self.keys.owned_count())
            .key(self.keys.dead_letters())
            .key(self.keys.held_ids())
            .key(self.keys.queues());
        let mut it = array("item_counts", self.run(call).await?)?.into_iter();
        let mut next = || -> Result<u64> { uint("item_counts", &it.next().unwrap_or(Value::Nil)) };
        Ok(ItemCounts::new(next()?, next()?, next()?))
    }

    /// One script: the default queue and every queue of the set of queues, each
    /// counted from its zsets and the per-queue counts (the default queue's owned and
    /// dead-lettered items are the totals less the others'); queues with no item are
    /// left out, the rest sorted by name.
    async fn queue_counts(&self) -> Result<Vec<QueueCounts>> {
        const OP: &str = "queue_counts";
        let mut call = QUEUE_COUNTS.prepare_invoke();
        call.key(self.keys.pending())
            .key(self.keys.owned_count())
            .key(self.keys.dead_letters())
            .key(self.keys.held_ids())
            .key(self.keys.queues())
            .key(self.keys.queues_owned())
            .key(self.keys.queues_dead_letters());
        let flat = array(OP, self.run(call).await?)?;
        if !flat.len().is_multiple_of(4) {
            return Err(unexpected(OP, "a reply of another length"));
        }
        let mut out = Vec::with_capacity(flat.len() / 4);
        let mut it = flat.into_iter();
        while let (Some(name), Some(pending), Some(owned), Some(dead)) =
            (it.next(), it.next(), it.next(), it.next())
        {
            let queue = QueueName::new(&text(OP, name)?)
                .map_err(|_| unexpected(OP, "an invalid stored queue name"))?;
            let counts = ItemCounts::new(uint(OP, &pending)?, uint(OP, &owned)?, uint(OP, &dead)?);
            if counts != ItemCounts::default() {
                out.push(QueueCounts::new(queue, counts));
            }
        }
        out.sort_by(|a, b| a.queue.as_str().cmp(b.queue.as_str()));
        Ok(out)
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let mut call = ITEMS.prepare_invoke();
        let code = match state {
            ItemStateKind::Pending => {
                call.key(self.keys.pending())
                    .key(self.keys.held_ids())
                    .key(self.keys.queues());
                "p"
            }
            ItemStateKind::Owned => {
                call.key(self.keys.item_ids());
                "o"
            }
            ItemStateKind::DeadLettered => {
                call.key(self.keys.dead_letters());
                "d"
            }
        };
        call.arg(code)
            .arg(after.map_or(0, |id| id.0))
            .arg(limit)
            .arg(self.keys.item_prefix());
        let flat = array("items", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 10);
        let mut it = flat.into_iter();
        while let Some(id) = it.next() {
            let id = ItemId(uint("items", &id)?);
            out.push(item_record("items", id, &mut it)?);
        }
        Ok(out)
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let mut call = RETRY_DEAD_LETTER.prepare_invoke();
        call.key(self.keys.item(id))
            .key(self.keys.dead_letters())
            .key(self.keys.dead_letter_times())
            .arg(id.0);
        match int("retry_dead_letter", &self.run(call).await?)? {
            2 => Ok(()),
            1 => Err(Error::invalid("item", InputProblem::NotDeadLettered)),
            _ => Err(Error::invalid("item", InputProblem::NoSuchItem)),
        }
    }

    async fn cancel(&self, id: ItemId) -> Result<Option<ItemState>> {
        let mut call = CANCEL.prepare_invoke();
        call.key(self.keys.item(id))
            .key(self.keys.dead_letters())
            .key(self.keys.dead_letter_times())
            .arg(id.0);
        match self.run(call).await? {
            Value::Nil => Ok(None),
            state => item_state("cancel", &text("cancel", state)?).map(Some),
        }
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let mut call = RETRY_DEAD_LETTERS.prepare_invoke();
        call.key(self.keys.dead_letters())
            .key(self.keys.dead_letter_times())
            .arg(limit)
            .arg(self.keys.item_prefix());
        ids("retry_dead_letters", self.run(call).await?)
    }
}
