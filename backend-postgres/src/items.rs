//! `impl ItemStore for PostgresStore`: each method runs its own statement (below), or
//! forwards to `deaths.rs` (the dead set) and `batch.rs` (`sweep_many`,
//! which a sweep of one token reaches as a batch of one). Their input was checked
//! before the call ([`liveness_core::CheckInput`]); they refuse only what the core
//! cannot judge (an item id that names no item).

use std::time::Duration;

use liveness_core::{
    async_trait, BatchResult, DeadToken, EnqueueOptions, Error, FencingToken, Item, ItemId,
    ItemRecord, ItemState, ItemStore, Lease, LostCause, Outcome, QueueName, RequestId, Result,
    Sweep, DEAD_LETTER_TRIM,
};

use crate::core::{
    count_of, db_token, delay_param, expiry_of, get, id_of, id_param, item_times, limit_param,
    on_key, on_owned_item, queue_of, record_of, state_of, token_of, PostgresStore,
};
use crate::error::corrupt;
use crate::BACKEND;

/// How many times a keyed `enqueue` reruns its statement after waiting on a
/// concurrent enqueue of the same key (the rerun then answers that one's id).
const ENQUEUE_RETRIES: usize = 8;

/// `enqueue`: $1 payload, $2 max_attempts, $3 the delay in µs (NULL: due at once), $4
/// the queue (migration 13). A delayed item is due at the server's
/// `clock_timestamp()` + the delay (migration 9); it is claimable (`ready_at`,
/// migration 12) from then, else from the server's now (read beside it: the two are
/// µs apart); enqueued (`enqueued_at`, migration 14) at the server's now too.
/// Notifies nothing itself: PostgreSQL serializes the commits of notifying
/// transactions, which would make concurrent single enqueues wait on each other; the
/// handle sends one notification after the commit instead, for all its writes in
/// flight ([`PostgresStore::pending_local`]). Columns: the id, and `woke` (1: the
/// item is new).
const ENQUEUE: &str = r#"
INSERT INTO items (payload, max_attempts, due_at, ready_at, queue, enqueued_at)
VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 microsecond',
        clock_timestamp() + coalesce($3::bigint, 0) * interval '1 microsecond', $4,
        clock_timestamp())
RETURNING id, 1::bigint AS woke
"#;

/// `enqueue_many`: $1 the payloads, $2 max_attempts, $3 the delay in µs (NULL: due at
/// once; otherwise every item is due at the same instant, the server clock read once;
/// every item is claimable from the same instant, as by `ENQUEUE`, and enqueued at
/// one instant), $4 the pending channel, $5 the queue. One statement: the ids are
/// drawn in payload order (`ORDER BY` the position), so sorted they answer the
/// payloads in order. Notifies `enqueued` once for the whole batch, as `ENQUEUE` (the
/// scalar subquery runs once).
const ENQUEUE_MANY: &str = r#"
WITH new AS (
    INSERT INTO items (payload, max_attempts, due_at, ready_at, queue, enqueued_at)
    SELECT p, $2, (SELECT clock_timestamp() + $3::bigint * interval '1 microsecond'),
           (SELECT clock_timestamp() + coalesce($3::bigint, 0) * interval '1 microsecond'),
           $5::text, (SELECT clock_timestamp())
    FROM unnest($1::bytea[]) WITH ORDINALITY AS t(p, i) ORDER BY i
    RETURNING id
),
woke AS (SELECT pg_notify($4, 'enqueued'))
SELECT id, (SELECT count(*) FROM woke) AS woke FROM new
"#;

/// `enqueue` with an idempotency key: $1 payload, $2 max attempts, $3 key, $4 the
/// delay in µs (NULL: due at once), as `ENQUEUE`; $5 the key retention in µs, $6
/// [`FORGET_KEYS_AT_MOST`], $7 the queue.
///
/// Records the key with a freshly drawn item id and the server's `clock_timestamp()`
/// (migration 11), and inserts the item under that id, due and claimable as by
/// `ENQUEUE`, enqueued at the key's instant (`woke` 1: the handle notifies after the
/// commit, as for `ENQUEUE`);
/// when the key is already recorded (committed
/// before this statement) and not expired, answers its id and inserts nothing (`woke`
/// 0). A key is expired once more than the retention lies between its recording and
/// the statement's instant: its record is replaced, as if it had never been. No row:
/// a concurrent enqueue with the same key committed while this one waited on the
/// key; running the statement again answers its id.
///
/// `gone` is the keyed enqueue's share of the forgetting: it deletes at most
/// [`FORGET_KEYS_AT_MOST`] other expired keys, the oldest first on
/// `enqueue_keys_recorded`, skipping rows a concurrent enqueue holds, so expired keys
/// go as fast as new ones come and no statement's work grows with the backlog.
pub(crate) const ENQUEUE_KEYED: &str = r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
gone AS (
    DELETE FROM enqueue_keys WHERE key IN (
        SELECT key FROM enqueue_keys
        WHERE recorded_at < (SELECT t FROM clk) - $5::bigint * interval '1 microsecond'
          AND key <> $3
        ORDER BY recorded_at
        LIMIT $6
        FOR UPDATE SKIP LOCKED
    )
),
k AS (
    INSERT INTO enqueue_keys (key, id, recorded_at)
    SELECT $3, nextval(pg_get_serial_sequence('items', 'id')), t FROM clk
    ON CONFLICT (key) DO UPDATE SET id = EXCLUDED.id, recorded_at = EXCLUDED.recorded_at
    WHERE enqueue_keys.recorded_at
        < EXCLUDED.recorded_at - $5::bigint * interval '1 microsecond'
    RETURNING id
),
new AS (
    INSERT INTO items (id, payload, max_attempts, due_at, ready_at, queue, enqueued_at)
    OVERRIDING SYSTEM VALUE
    SELECT id, $1, $2, clock_timestamp() + $4::bigint * interval '1 microsecond',
           clock_timestamp() + coalesce($4::bigint, 0) * interval '1 microsecond', $7::text,
           (SELECT t FROM clk)
    FROM k
    RETURNING id
)
SELECT id, 1::bigint AS woke FROM new
UNION ALL
SELECT id, 0 FROM enqueue_keys
WHERE key = $3
  AND recorded_at >= (SELECT t FROM clk) - $5::bigint * interval '1 microsecond'
  AND NOT EXISTS (SELECT 1 FROM k)
"#;

/// The most expired keys one keyed enqueue deletes (the `LIMIT` of `ENQUEUE_KEYED`'s
/// `gone`, its $6): more than the one it records, so a backlog (after a burst, or an upgrade)
/// shrinks, yet a small, bounded write.
const FORGET_KEYS_AT_MOST: usize = 100;

/// The ids of one queue's due pending items, `$queue` the SQL naming it: those whose
/// due time came (by it, then id) and those never held back (by id), each branch at
/// most `$4` and locking only the rows it hands up. What [`CLAIM`] and [`CLAIM_FROM`]
/// pick from.
macro_rules! due_in_queue {
    ($queue:literal) => {
        concat!(
            r#"        SELECT id FROM (
            SELECT id FROM items
            WHERE queue = "#,
            $queue,
            r#" AND state = 0 AND due_at IS NOT NULL
              AND due_at <= (SELECT t FROM clk)
              AND EXISTS (SELECT 1 FROM admit)
            ORDER BY due_at, id
            LIMIT $4
            FOR UPDATE SKIP LOCKED
        ) came_due
        UNION ALL
        SELECT id FROM (
            SELECT id FROM items
            WHERE queue = "#,
            $queue,
            r#" AND state = 0 AND due_at IS NULL
              AND EXISTS (SELECT 1 FROM admit)
            ORDER BY id
            LIMIT $4
            FOR UPDATE SKIP LOCKED
        ) ready"#
        )
    };
}

/// The claim statement around `$pick`, the CTE that picks the items to take (`id`,
/// and `pos`, the place of the item's queue in the claim's list): [`CLAIM`] from one
/// queue, [`CLAIM_FROM`] from several. $1 space, $2 name, $3 token, $4 n, $5 request
/// id; `$pick` adds $6.
///
/// Checks the lease (current and live by the server clock) and takes up to n pending
/// items that are due, skipping rows other claimers have locked, in one statement,
/// recording the request id on each and clearing its due time. A repeat of the request
/// (items the token owns carry its id) answers those items, whatever their queues,
/// and takes nothing new. Otherwise the claim is admitted only when its id is above
/// the token's high-water mark (`leases.last_claim`), which `admit` raises to it on
/// the lease row (a row lock: concurrent claims of one token serialize there, and the
/// later one re-checks the mark the earlier one wrote); a late or repeated copy, or an
/// older id, takes nothing. The lease row is held `FOR KEY SHARE` until commit, so a
/// concurrent reap (a DELETE) waits for the claim and then requeues what it took (and
/// the sweep of a dead session skips a member a claim holds, until it committed). A
/// riding member is live while its session is ([`expiry_of`]), judged in this same
/// statement. Each item taken is stamped attempted at the statement's instant
/// (`attempted_at`, migration 14) and answers how long it waited (`waited_us`): that
/// instant less when it became claimable (`ready_at`, migration 12), in µs, never
/// negative; a repeat's items answer NULL. One row per claimed item, by
/// `pos` then id (a repeat's: by id), or one row with NULL item columns; `cur_token`
/// NULL when the key has no lease. Columns: cur_token, live, id, payload, attempts,
/// max_attempts, waited_us, queue.
macro_rules! claim_statement {
    ($pick:expr) => {
        concat!(
            r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
cur AS MATERIALIZED (
    SELECT l.token, "#,
            expiry_of!("l"),
            r#" > clk.t AS live
    FROM leases l, clk
    WHERE l.space = $1 AND l.name = $2
    FOR KEY SHARE OF l
),
prev AS MATERIALIZED (
    SELECT id, payload, attempts, max_attempts, NULL::bigint AS waited_us, queue,
           NULL::bigint AS pos
    FROM items
    WHERE state = 1 AND owner = $3 AND claim_request = $5
      AND EXISTS (SELECT 1 FROM cur WHERE token = $3 AND live)
),
admit AS (
    UPDATE leases l SET last_claim = $5
    FROM clk
    WHERE l.space = $1 AND l.name = $2 AND l.token = $3 AND "#,
            expiry_of!("l"),
            r#" > clk.t
      AND NOT EXISTS (SELECT 1 FROM prev)
      AND (l.last_claim IS NULL OR l.last_claim < $5)
    RETURNING l.token
),
"#,
            $pick,
            r#",
got AS (
    UPDATE items i
    SET state = 1, owner = $3, attempts = i.attempts + 1, claim_request = $5, due_at = NULL,
        attempted_at = (SELECT t FROM clk)
    FROM pick WHERE i.id = pick.id
    RETURNING i.id, i.payload, i.attempts, i.max_attempts,
              greatest(0, (extract(epoch FROM (SELECT t FROM clk) - i.ready_at) * 1000000)::bigint)
              AS waited_us,
              i.queue, pick.pos
),
answer AS (
    SELECT * FROM got
    UNION ALL
    SELECT * FROM prev
)
SELECT cur.token AS cur_token, cur.live, answer.id, answer.payload, answer.attempts,
       answer.max_attempts, answer.waited_us, answer.queue
FROM (SELECT 1) AS one
LEFT JOIN cur ON true
LEFT JOIN answer ON true
ORDER BY answer.pos, answer.id
"#
        )
    };
}

/// `claim` from one queue: `claim_statement!` with $6 the queue. The items come first
/// from the queue's held-back ones that came due (`due_at` at or before the
/// statement's instant, on `items_held_queue`, earliest due first, so a backoff that
/// ended does not wait behind a backlog), then from those due at once
/// (`items_ready_queue`), lowest id first (migrations 9 and 13): each a range of the
/// queue's own index, so neither another queue's items nor an item not yet due is
/// read. The outer `LIMIT` stops the second branch as soon as the first filled the
/// claim, and each branch locks only the rows it hands up. The same statement as
/// before queues, with `queue = $6` an index condition of both branches.
pub(crate) const CLAIM: &str = claim_statement!(concat!(
    r#"pick AS (
    SELECT id, 1::bigint AS pos FROM (
"#,
    due_in_queue!("$6"),
    r#"
    ) due
    LIMIT $4
)"#
));

/// `claim_from` several queues: `claim_statement!` with $6 the queues, in the order
/// given. For each queue in turn (`unnest ... WITH ORDINALITY`, the outer side of a
/// nested loop, so in the order given), the branches of [`CLAIM`] on that queue's
/// ranges; the outer `LIMIT` stops as soon as the claim is filled, so a later queue is
/// read only when the earlier ones had too few items due, and no row beyond the n
/// taken is locked. No `ORDER BY` there: a sort would read (and lock) up to n items
/// of every queue named; the answer is sorted by the queue's place (`pos`) instead.
pub(crate) const CLAIM_FROM: &str = claim_statement!(concat!(
    r#"pick AS (
    SELECT due.id, q.pos
    FROM unnest($6::text[]) WITH ORDINALITY AS q(name, pos)
    CROSS JOIN LATERAL (
"#,
    due_in_queue!("q.name"),
    r#"
    ) due
    LIMIT $4
)"#
));

/// `finish` with `Outcome::Completed`: $1 id, $2 token. Deletes the item iff that
/// token owns it.
const COMPLETE: &str = r#"
DELETE FROM items WHERE id = $1 AND state = 1 AND owner = $2 RETURNING id
"#;

/// The CTE `forgot` of a statement that may dead-letter items: when `$when` (SQL
/// text, a condition on the statement's own CTEs: it dead-lettered something) holds,
/// deletes at most `$limit` dead letters dead-lettered `$retention` µs or more before
/// the server's now (`dead_at`, migration 15), the oldest first, as an operator's
/// `cancel` would (`CANCEL` in `operator.rs`: the row goes, and with it every count
/// and index entry, which are all read from `items`). The now is read once, an
/// init-plan parameter, so the bound is an index condition on `items_dead_at`: only
/// expired dead letters are read; the rows picked are deleted by their primary key
/// (`= ANY` of the picked ids: never a join the planner could turn into a scan of
/// the table). Rows a concurrent statement holds (a retry, a cancel, another's share)
/// are skipped. The items the statement itself dead-letters are not among them (its
/// snapshot shows them owned). Answers the ids deleted.
/// Written once for `FAIL` here and `SWEEP` in `deaths.rs`; the three are SQL text.
macro_rules! forget_dead_letters {
    ($when:literal, $retention:literal, $limit:literal) => {
        concat!(
            r#"
forgot AS (
    DELETE FROM items WHERE id = ANY (ARRAY(
        SELECT id FROM items
        WHERE state = 2
          AND dead_at <= (SELECT clock_timestamp()) - "#,
            $retention,
            r#"::bigint * interval '1 microsecond'
          AND "#,
            $when,
            r#"
        ORDER BY dead_at
        LIMIT "#,
            $limit,
            r#"
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING id
)"#
        )
    };
}
pub(crate) use forget_dead_letters;

/// `finish_with_error` with `Outcome::Retry` (`$3` true) or `Outcome::DeadLetter`: $1
/// id, $2 token, $3 retry, $4 the retry's wait in µs (NULL: due at once), $5 the
/// error text ('': none), $6 the dead-letter retention in µs, $7 the most expired
/// dead letters to delete ([`DEAD_LETTER_TRIM`]). Back to pending (0) or
/// dead-lettered (2) iff that token owns it; back to pending with a wait, due at the
/// server's `clock_timestamp()` + the wait (migration 9), claimable (`ready_at`,
/// migration 12) from then, else from the server's now; its attempt finished
/// (`finished_at`, migration 14) at the server's now either way; dead-lettered
/// (`dead_at`, migration 15) at that now too, or not (NULL) when back to pending; its
/// last error becomes $5 unless that is empty (migration 10). When it dead-lettered
/// the item, the same statement deletes expired dead letters ([`forget_dead_letters`]).
/// Back to pending, the handle notifies after the commit, as for `ENQUEUE` (many
/// workers failing jobs at once would otherwise wait on each other's notifying
/// commits). Column: the new state.
pub(crate) const FAIL: &str = concat!(
    r#"
WITH failed AS (
    UPDATE items
    SET state = CASE WHEN $3 AND attempts < max_attempts THEN 0 ELSE 2 END,
        owner = NULL,
        due_at = CASE WHEN $3 AND attempts < max_attempts
                      THEN clock_timestamp() + $4::bigint * interval '1 microsecond'
                 END,
        ready_at = clock_timestamp() + coalesce($4::bigint, 0) * interval '1 microsecond',
        finished_at = clock_timestamp(),
        dead_at = CASE WHEN $3 AND attempts < max_attempts THEN NULL ELSE clock_timestamp() END,
        last_error = coalesce(nullif($5::text, ''), last_error)
    WHERE id = $1 AND state = 1 AND owner = $2
    RETURNING state
),"#,
    forget_dead_letters!("EXISTS (SELECT 1 FROM failed WHERE state = 2)", "$6", "$7"),
    r#"
SELECT state FROM failed
"#
);

/// `next_due`: µs from the server's now (read once) until the earliest due time of a
/// held-back item that is not due yet; no row when there is none. The first entry
/// after now of each queue's range of `items_held_queue` (migration 13), the bound an
/// index condition, so the items that came due already and wait for a claim are not
/// read; the queues holding held-back items are found one index probe each
/// (`queues`: the next name after the last, a loose index scan): O(queues × log
/// items).
pub(crate) const NEXT_DUE: &str = r#"
WITH RECURSIVE clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
queues AS (
    (SELECT queue FROM items WHERE state = 0 AND due_at IS NOT NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT i.queue FROM items i
            WHERE i.state = 0 AND i.due_at IS NOT NULL AND i.queue > q.queue
            ORDER BY i.queue LIMIT 1)
    FROM queues q
    WHERE q.queue IS NOT NULL
)
SELECT ceil(extract(epoch FROM (first.due_at - (SELECT t FROM clk))) * 1000000)::bigint
FROM queues q
CROSS JOIN LATERAL (
    SELECT due_at FROM items
    WHERE state = 0 AND due_at IS NOT NULL AND queue = q.queue
      AND due_at > (SELECT t FROM clk)
    ORDER BY due_at
    LIMIT 1
) first
ORDER BY first.due_at
LIMIT 1
"#;

/// `item`: $1 id. Columns: those [`record_of`] reads.
const ITEM: &str = concat!(
    "SELECT id, payload, attempts, max_attempts, state, owner, last_error, queue, ",
    item_times!(""),
    " FROM items WHERE id = $1"
);

/// An error text as `text` can hold it: PostgreSQL's `text` refuses the character
/// NUL, which becomes U+FFFD (the replacement character); every other character is
/// kept as given.
fn error_param(error: &str) -> String {
    error.replace('\0', "\u{FFFD}")
}

#[async_trait]
impl ItemStore for PostgresStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let row = match options.key {
            None => {
                let q = sqlx::query(ENQUEUE)
                    .bind(payload)
                    .bind(i64::from(options.max_attempts))
                    .bind(delay_param(options.delay))
                    .bind(options.queue.as_str());
                self.db().fetch_one(q).await?
            }
            Some(key) => {
                let key = key.to_hex();
                let retention = self.key_retention_param();
                let mut found = None;
                for _ in 0..ENQUEUE_RETRIES {
                    let q = sqlx::query(ENQUEUE_KEYED)
                        .bind(payload)
                        .bind(i64::from(options.max_attempts))
                        .bind(&key)
                        .bind(delay_param(options.delay))
                        .bind(retention)
                        .bind(limit_param(FORGET_KEYS_AT_MOST))
                        .bind(options.queue.as_str());
                    found = self.db().fetch_optional(q).await?;
                    if found.is_some() {
                        break;
                    }
                }
                found.ok_or_else(|| {
                    Error::unavailable(BACKEND, "enqueue: the key stayed contended; retry")
                })?
            }
        };
        let woke: i64 = get(&row, 1)?;
        if woke > 0 {
            self.pending_local();
            self.notify_pending();
        }
        id_of(get(&row, 0)?)
    }

    async fn enqueue_many(
        &self,
        payloads: &[Vec<u8>],
        options: EnqueueOptions,
    ) -> Result<Vec<ItemId>> {
        let q = sqlx::query(ENQUEUE_MANY)
            .bind(payloads)
            .bind(i64::from(options.max_attempts))
            .bind(delay_param(options.delay))
            .bind(self.pending_channel())
            .bind(options.queue.as_str());
        let rows = self.db().fetch_all(q).await?;
        if !rows.is_empty() {
            self.pending_local();
        }
        let mut ids = rows
            .iter()
            .map(|row| id_of(get(row, 0)?))
            .collect::<Result<Vec<_>>>()?;
        ids.sort_unstable();
        if ids.len() != payloads.len() {
            return Err(corrupt("enqueue_many: one id per payload"));
        }
        Ok(ids)
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        self.claim_from(lease, &[QueueName::DEFAULT], n, req).await
    }

    async fn claim_from(
        &self,
        lease: &Lease,
        queues: &[QueueName],
        n: usize,
        req: RequestId,
    ) -> Result<Vec<Item>> {
        // One queue (the default's among them): the claim's own statement, that
        // queue's ranges of the indexes; several: the same, queue after queue.
        let statement = match queues {
            [_] => CLAIM,
            _ => CLAIM_FROM,
        };
        let q = on_key(statement, &lease.key)
            .bind(db_token(lease.token))
            .bind(limit_param(n))
            .bind(req.to_hex());
        let q = match queues {
            [only] => q.bind(only.as_str()),
            _ => q.bind(queues.iter().map(QueueName::as_str).collect::<Vec<_>>()),
        };
        let rows = self.db().fetch_all(q).await?;
        let Some(first) = rows.first() else {
            return Err(corrupt("claim answered no row"));
        };
        let current: Option<i64> = get(first, 0)?;
        let live: Option<bool> = get(first, 1)?;
        match current {
            None => return Err(lease.lost(LostCause::Released)),
            Some(t) if token_of(t)? != lease.token => return Err(lease.lost(LostCause::Superseded)),
            Some(_) if live != Some(true) => return Err(lease.lost(LostCause::Expired)),
            Some(_) => {}
        }
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: Option<i64> = get(row, 2)?;
            let Some(id) = id else { continue };
            let waited_us: Option<i64> = get(row, 6)?;
            let item = Item::new(
                id_of(id)?,
                get(row, 3)?,
                count_of(get(row, 4)?, "attempts")?,
                count_of(get(row, 5)?, "max_attempts")?,
            );
            items.push(item.with_queue(queue_of(get(row, 7)?)?).with_waited(
                waited_us.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0))),
            ));
        }
        Ok(items)
    }

    async fn finish(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> Result<Option<ItemState>> {
        self.finish_with_error(lease, id, outcome, "").await
    }

    async fn finish_with_error(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
        error: &str,
    ) -> Result<Option<ItemState>> {
        let fenced = || lease.fenced(id);
        let q = match outcome.retry() {
            // A completed item's row goes, its error text with it.
            None => on_owned_item(COMPLETE, lease, id),
            Some(retry) => on_owned_item(FAIL, lease, id).map(|q| {
                q.bind(retry)
                    .bind(delay_param(outcome.delay()))
                    .bind(error_param(error))
                    .bind(self.dead_letter_retention_param())
                    .bind(limit_param(DEAD_LETTER_TRIM))
            }),
        }
        .ok_or_else(fenced)?;
        let row = self.db().fetch_optional(q).await?.ok_or_else(fenced)?;
        match outcome.retry() {
            None => Ok(None),
            Some(_) => {
                let state = state_of(get(&row, 0)?, None)?;
                if state == ItemState::Pending {
                    self.pending_local();
                    self.notify_pending();
                }
                Ok(Some(state))
            }
        }
    }

    async fn sweep_many(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        self.sweep_batch(tokens).await
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.list_dead_tokens(limit).await
    }

    /// Ticks when, in any process on the same database and namespace, an item became
    /// pending: the statements that make one pending notify on
    /// [`PostgresStore::pending_channel`], which the handle's LISTEN task (started
    /// here, as by `wakeups`, unless the URL says `notify=false`) hears; the handle's
    /// own writes tick it at once, with or without the task.
    fn pending(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.subscribe_pending())
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let Some(db_id) = id_param(id) else {
            return Ok(None);
        };
        let q = sqlx::query(ITEM).bind(db_id);
        let row = self.db().fetch_optional(q).await?;
        row.as_ref().map(record_of).transpose()
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        let q = sqlx::query(NEXT_DUE);
        let Some(row) = self.db().fetch_optional(q).await? else {
            return Ok(None);
        };
        let left_us: i64 = get(&row, 0)?;
        // Clamped at zero: the row is due after the statement's instant, so only a
        // server clock stepped back could make it negative.
        Ok(Some(Duration::from_micros(
            u64::try_from(left_us).unwrap_or(0),
        )))
    }
}

impl PostgresStore {
    /// The key retention in µs, as `ENQUEUE_KEYED` binds it (at most 366 days,
    /// [`PostgresConfig::with_key_retention`](crate::PostgresConfig::with_key_retention):
    /// it fits).
    fn key_retention_param(&self) -> i64 {
        let retention = self
            .caps()
            .key_retention
            .unwrap_or(liveness_core::DEFAULT_KEY_RETENTION);
        i64::try_from(retention.as_micros()).unwrap_or(i64::MAX)
    }

    /// The dead-letter retention in µs, as `FAIL` and `SWEEP` (in `deaths.rs`) bind
    /// it (at most 366 days,
    /// [`PostgresConfig::with_dead_letter_retention`](crate::PostgresConfig::with_dead_letter_retention):
    /// it fits).
    pub(crate) fn dead_letter_retention_param(&self) -> i64 {
        let retention = self
            .caps()
            .dead_letter_retention
            .unwrap_or(liveness_core::DEFAULT_DEAD_LETTER_RETENTION);
        i64::try_from(retention.as_micros()).unwrap_or(i64::MAX)
    }
}
