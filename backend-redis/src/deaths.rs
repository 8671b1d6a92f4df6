//! Finding deaths and their history: the expired leases of a space, the dead set and
//! the death records (reaping and sweeping are batches: `batch.rs`). Inherent methods
//! the trait impls of `lease.rs`, `items.rs` and `operator.rs` call with checked input
//! (limits already clamped).

use std::time::Duration;

use liveness_core::{
    DeadToken, DeathCause, DeathRecord, ExpiredLease, FencingToken, HolderId, Key, Name, Result,
    Space, StoreTime, Swept,
};
use redis::Value;

use crate::core::{array, scripts, text, uint, unexpected, RedisStore};

scripts! {
    EXPIRED = "expired", DEAD_TOKENS = "dead_tokens", DEATHS = "deaths",
}

impl RedisStore {
    /// Up to `limit` (already clamped) leases of `space` whose expiry passed.
    pub(crate) async fn find_expired(
        &self,
        space: &Space,
        limit: usize,
    ) -> Result<Vec<ExpiredLease>> {
        let mut call = EXPIRED.prepare_invoke();
        call.key(self.keys.expiry(space))
            .arg(self.keys.lease_prefix(space))
            .arg(limit);
        let flat = array("expired", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 3);
        let mut it = flat.into_iter();
        while let (Some(name), Some(holder), Some(token)) = (it.next(), it.next(), it.next()) {
            let name = Name::new(text("expired", name)?)
                .map_err(|_| unexpected("expired", "an invalid stored name"))?;
            out.push(ExpiredLease::new(
                Key::new(space.clone(), name),
                HolderId::new(text("expired", holder)?)
                    .map_err(|_| unexpected("expired", "an invalid stored holder"))?,
                FencingToken(uint("expired", &token)?),
            ));
        }
        Ok(out)
    }

    /// Up to `limit` (already clamped) entries of the dead set, lowest token first.
    pub(crate) async fn dead_set(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let mut call = DEAD_TOKENS.prepare_invoke();
        call.key(self.keys.dead()).arg(limit);
        array("dead_tokens", self.run(call).await?)?
            .into_iter()
            .map(|member| {
                let member = text("dead_tokens", member)?;
                let (token, key) = member
                    .split_once(':')
                    .ok_or_else(|| unexpected("dead_tokens", "a member without a token"))?;
                Ok(DeadToken::new(
                    Key::parse(key)
                        .map_err(|_| unexpected("dead_tokens", "an invalid stored key"))?,
                    FencingToken(
                        token
                            .parse()
                            .map_err(|_| unexpected("dead_tokens", "an invalid token"))?,
                    ),
                ))
            })
            .collect()
    }

    /// Up to `limit` (already clamped) death records with a seq below `before`, newest
    /// first.
    pub(crate) async fn death_records(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<DeathRecord>> {
        let mut call = DEATHS.prepare_invoke();
        call.key(self.keys.death_seq())
            .arg(before.map_or_else(String::new, |b| b.to_string()))
            .arg(limit);
        let flat = array("deaths", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 9);
        let mut it = flat.into_iter();
        while let Some(seq) = it.next() {
            let mut next = || it.next().unwrap_or(Value::Nil);
            let seq = uint("deaths", &seq)?;
            let key = Key::parse(&text("deaths", next())?)
                .map_err(|_| unexpected("deaths", "an invalid stored key"))?;
            let holder = HolderId::new(text("deaths", next())?)
                .map_err(|_| unexpected("deaths", "an invalid stored holder"))?;
            let token = FencingToken(uint("deaths", &next())?);
            let at = StoreTime::from_epoch(Duration::from_micros(uint("deaths", &next())?));
            let cause = match uint("deaths", &next())? {
                0 => DeathCause::Reaped,
                1 => DeathCause::Released,
                2 => DeathCause::Superseded,
                _ => return Err(unexpected("deaths", "an invalid stored cause")),
            };
            let requeued = text("deaths", next())?;
            let (dead, members) = (text("deaths", next())?, text("deaths", next())?);
            // Absent until a sweep wrote it; a dead session's sweep writes `members` first.
            let swept = if requeued.is_empty() && members.is_empty() {
                None
            } else {
                let count = |v: &str| match v {
                    "" => Ok(0),
                    v => v
                        .parse::<u64>()
                        .map_err(|_| unexpected("deaths", "an invalid stored count")),
                };
                Some(Swept::new(
                    count(&members)?,
                    count(&requeued)?,
                    count(&dead)?,
                ))
            };
            out.push(DeathRecord::new(seq, key, holder, token, at, cause, swept));
        }
        Ok(out)
    }
}
