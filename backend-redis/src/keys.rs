//! The key layout of one namespace. Every key starts with `liveness:{ns}:`, so the
//! whole namespace shares one Redis Cluster hash slot and every script's keys are in
//! the same slot.

use liveness_core::{FencingToken, ItemId, Key, Namespace, QueueName, Space};

/// The keys of one namespace.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(ns: &Namespace) -> Keys {
        Keys {
            prefix: format!("liveness:{{{}}}:", ns.as_str()),
        }
    }

    /// The pattern that matches every key of the namespace (for clean-up).
    pub(crate) fn pattern(&self) -> String {
        format!("{}*", self.prefix)
    }

    /// The hash of the lease on `key`: holder `h`, token `t`, ttl ms `ttl`, expiry µs `e`
    /// (by the clock of the server that wrote it), `ep`, the expiry epoch it was last
    /// written in (see [`Keys::srv`]), `ix`, its score in the expiry index, and `c`, the
    /// greatest claim request id admitted under the token (its claim high-water mark;
    /// absent until the first claim, gone with the hash).
    pub(crate) fn lease(&self, key: &Key) -> String {
        format!("{}l:{}/{}", self.prefix, key.space(), key.name())
    }

    /// The key whose lease record is stored at `lease_key` (as a riding member's
    /// record names its session); `None` for a string of another shape.
    pub(crate) fn key_of_lease(&self, lease_key: &str) -> Option<Key> {
        let text = lease_key.strip_prefix(&self.prefix)?.strip_prefix("l:")?;
        Key::parse(text).ok()
    }

    /// The prefix of every lease key in `space` (the name follows).
    pub(crate) fn lease_prefix(&self, space: &Space) -> String {
        format!("{}l:{}/", self.prefix, space)
    }

    /// The expiry index of `space`: ZSET of names, each scored no later than its
    /// lease's expiry µs (its `ix`; coarse, see the prelude's `renew_one`).
    pub(crate) fn expiry(&self, space: &Space) -> String {
        format!("{}x:{}", self.prefix, space)
    }

    /// The fencing token counter (INCR).
    pub(crate) fn tokens(&self) -> String {
        format!("{}tokens", self.prefix)
    }

    /// The server record: HASH `id` (the run_id of the server last seen judging
    /// expiries), `ep` (the expiry epoch it opened), `since` (when, by its clock).
    pub(crate) fn srv(&self) -> String {
        format!("{}srv", self.prefix)
    }

    /// The dead set: ZSET of `token:space/name`, score = token.
    pub(crate) fn dead(&self) -> String {
        format!("{}dead", self.prefix)
    }

    /// The item id counter (INCR).
    pub(crate) fn item_ids(&self) -> String {
        format!("{}ids", self.prefix)
    }

    /// The prefix of every item hash (the id follows).
    pub(crate) fn item_prefix(&self) -> String {
        format!("{}i:", self.prefix)
    }

    /// The hash of one item: payload `p`, attempts `a`, max attempts `m`, state `s`,
    /// `r`, the request id of the claim that assigned it to its owner, `w`, when it
    /// last became claimable (µs of the server clock, its due time when held back:
    /// written by every script that makes it pending, read by the claim for
    /// `Item::waited`), `e`, the error text of its latest failure that gave one
    /// (absent until then; deleted with the hash), and `q`, the name of its queue,
    /// written only for a queue other than [`QueueName::DEFAULT`] (absent: the default
    /// queue, as every item an earlier version wrote).
    pub(crate) fn item(&self, id: ItemId) -> String {
        format!("{}i:{}", self.prefix, id.0)
    }

    /// One enqueue idempotency key: STRING, the id of the item its enqueue added,
    /// written with `PX` the key retention (the server's clock counts it down), so it
    /// is gone once the retention has passed. `key` is the request id's 32 hex digits.
    pub(crate) fn enqueue_key(&self, key: &str) -> String {
        format!("{}ek:{}", self.prefix, key)
    }

    /// The enqueue idempotency keys that earlier versions kept for good: HASH of key
    /// (32 hex digits) -> item id. Read, never written: a key found there still
    /// answers its id (a retry of an enqueue made before the upgrade).
    pub(crate) fn legacy_enqueue_keys(&self) -> String {
        format!("{}ekeys", self.prefix)
    }

    /// Pending items of the default queue that are due (claimable): ZSET of ids,
    /// score = id. The key earlier versions kept every pending item in.
    pub(crate) fn pending(&self) -> String {
        format!("{}pending", self.prefix)
    }

    /// The due pending items of `queue`: [`Keys::pending`] for the default queue,
    /// else `qp:<queue>` (ZSET of ids, score = id). Scripts that meet an item of any
    /// queue derive the same names from its `q` (`queue_keys` of
    /// `prelude_declare_dead.lua`).
    pub(crate) fn queue_pending(&self, queue: QueueName) -> String {
        match queue.is_default() {
            true => self.pending(),
            false => format!("{}qp:{}", self.prefix, queue.as_str()),
        }
    }

    /// The held-back items of `queue` by due time: [`Keys::held`] for the default
    /// queue, else `qh:<queue>` (ZSET of ids, score = due µs).
    pub(crate) fn queue_held(&self, queue: QueueName) -> String {
        match queue.is_default() {
            true => self.held(),
            false => format!("{}qh:{}", self.prefix, queue.as_str()),
        }
    }

    /// The held-back items of `queue` by id: [`Keys::held_ids`] for the default
    /// queue, else `qhi:<queue>` (ZSET of ids, score = id).
    pub(crate) fn queue_held_ids(&self, queue: QueueName) -> String {
        match queue.is_default() {
            true => self.held_ids(),
            false => format!("{}qhi:{}", self.prefix, queue.as_str()),
        }
    }

    /// Every held-back item of the queues other than the default, by due time: ZSET
    /// of ids, score = due µs, beside each queue's own `qh:<queue>`, so that
    /// `next_due` reads two zsets (this and [`Keys::held`]) whatever the number of
    /// queues. A claim that moves a named queue's due items out of its `qh:` removes
    /// them here too.
    pub(crate) fn queues_held(&self) -> String {
        format!("{}qheld", self.prefix)
    }

    /// The names of the queues other than the default that an enqueue used: SET,
    /// added to by the enqueue scripts, never shrunk; `item_counts` and
    /// `queue_counts` walk it (the default queue is always counted).
    pub(crate) fn queues(&self) -> String {
        format!("{}queues", self.prefix)
    }

    /// How many items each queue other than the default has owned: HASH of queue
    /// name -> count, moved by the scripts that claim and hand back items (once per
    /// queue and script). The default queue's count is [`Keys::owned_count`] less
    /// the sum of these: exact also for the items earlier versions counted.
    pub(crate) fn queues_owned(&self) -> String {
        format!("{}qowned", self.prefix)
    }

    /// How many items each queue other than the default has dead-lettered: HASH of
    /// queue name -> count, as [`Keys::queues_owned`] (the default queue's count:
    /// the size of [`Keys::dead_letters`] less the sum of these).
    pub(crate) fn queues_dead_letters(&self) -> String {
        format!("{}qdl", self.prefix)
    }

    /// The namespace's pending signal: a shard channel (`SPUBLISH`, `SSUBSCRIBE`; the
    /// hash tag puts it in the namespace's slot) on which every script that makes
    /// items pending publishes once (`signal_pending` of `prelude_declare_dead.lua`,
    /// which derives the same name from the prefix; written out in
    /// `enqueue_many.lua`). Channels are not keys: nothing is stored under it.
    pub(crate) fn pending_signal(&self) -> String {
        format!("{}pending-signal", self.prefix)
    }

    /// Pending items of the default queue held back until their due time (an
    /// enqueue's delay, a retry's wait): ZSET of ids, score = due µs by the server
    /// clock. A claim of the default queue moves those due into [`Keys::pending`].
    pub(crate) fn held(&self) -> String {
        format!("{}held", self.prefix)
    }

    /// The ids of [`Keys::held`] again, score = id: the pending page's order and
    /// the default queue's count.
    pub(crate) fn held_ids(&self) -> String {
        format!("{}heldi", self.prefix)
    }

    /// Items owned by `token`: ZSET of ids, score = id.
    pub(crate) fn owned(&self, token: FencingToken) -> String {
        format!("{}o:{}", self.prefix, token.0)
    }

    /// How many items are owned, over all tokens.
    pub(crate) fn owned_count(&self) -> String {
        format!("{}owned", self.prefix)
    }

    /// The lease index of `space`: ZSET of the names of its leases, score 0, read with
    /// ZRANGEBYLEX. Scripts derive it in-script as `<prefix>m:<space>` (see
    /// `prelude_declare_dead.lua`).
    pub(crate) fn leases(&self, space: &Space) -> String {
        format!("{}m:{}", self.prefix, space)
    }

    /// The death seq counter (INCR). The death records are hashes `<prefix>d:<seq>`
    /// and `<prefix>dt` maps a dead token to its record until the sweep; scripts
    /// derive both in-script from the namespace prefix (see `prelude.lua`).
    pub(crate) fn death_seq(&self) -> String {
        format!("{}dseq", self.prefix)
    }

    /// Dead-lettered items of every queue: ZSET of ids, score = id.
    pub(crate) fn dead_letters(&self) -> String {
        format!("{}dl", self.prefix)
    }

    /// The dead letters again, by when they were dead-lettered: ZSET of ids, score =
    /// µs of the server clock (the item's `tf` then), added to by every script that
    /// dead-letters (`hand_back`), removed from by every one that takes an item out of
    /// [`Keys::dead_letters`]. A script that dead-letters removes the oldest expired
    /// ones (`trim_dead_letters` of `prelude_dead_letters.lua`, which derives the name
    /// from the prefix). Dead letters from before it was kept are not in it: kept until
    /// an operator acts.
    pub(crate) fn dead_letter_times(&self) -> String {
        format!("{}dlt", self.prefix)
    }
}
