//! `impl LeaseStore for RedisStore`: each method runs its own script (declared next
//! to it), or forwards to the death finding of `deaths.rs` and the batches of
//! `batch.rs` (the single `acquire`, `join_session`, `renew` and `reap` of the core's
//! `Store` facade arrive here as batches of one). The input arrives checked (the
//! core's `CheckInput`).

use std::time::Duration;

use liveness_core::{
    async_trait, Acquire, BatchResult, ExpiredLease, FencingToken, HolderId, JoinAsk, Key, Lease,
    LeaseInfo, LeaseStore, Result, Space, StoreInfo, Ttl,
};
use redis::Value;

use crate::core::{
    int, key_text, record, scripts, status_of, text, uint, unexpected, us, RedisStore,
};
use crate::keys::Keys;

scripts! {
    RELEASE = "release", INSPECT = "inspect", NEXT_EXPIRY = "next_expiry",
}

/// Reads the stored fields of the lease on `key` that follow in `fields`: `{holder,
/// token, ttl ms, µs left (-1 when expired), session lease key or ''}`, as
/// `inspect.lua` answers them and as each group of `leases.lua` has them after its
/// name. A missing field reads as nil, which fails as a corrupt record.
pub(crate) fn lease_info(
    op: &'static str,
    keys: &Keys,
    key: Key,
    fields: &mut impl Iterator<Item = Value>,
) -> Result<LeaseInfo> {
    let mut next = || fields.next().unwrap_or(Value::Nil);
    let holder =
        HolderId::new(text(op, next())?).map_err(|_| unexpected(op, "an invalid stored holder"))?;
    let token = FencingToken(uint(op, &next())?);
    let ttl = Ttl::from_millis(uint(op, &next())?)
        .map_err(|_| unexpected(op, "an invalid stored ttl"))?;
    let left = int(op, &next())?;
    let session = match text(op, next())? {
        s if s.is_empty() => None,
        s => Some(
            keys.key_of_lease(&s)
                .ok_or_else(|| unexpected(op, "an invalid stored session"))?,
        ),
    };
    Ok(LeaseInfo::of(key, holder, token, ttl, status_of(left)).with_session(session))
}

#[async_trait]
impl LeaseStore for RedisStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        self.acquire_batch(asks).await
    }

    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        self.join_batch(session, asks).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        self.renew_batch(leases).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let mut call = RELEASE.prepare_invoke();
        call.key(self.keys.lease(&lease.key))
            .key(self.keys.expiry(lease.key.space()))
            .key(self.keys.dead())
            .arg(lease.key.name().as_str())
            .arg(lease.token.0)
            .arg(key_text(&lease.key))
            .arg(self.info.caps.death_retention);
        Ok(int("release", &self.run(call).await?)? == 1)
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let mut call = INSPECT.prepare_invoke();
        call.key(self.keys.lease(key));
        let Some(mut rec) = record("inspect", self.run(call).await?)? else {
            return Ok(None);
        };
        lease_info("inspect", &self.keys, key.clone(), &mut rec).map(Some)
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        self.find_expired(space, limit).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        if expired.is_empty() {
            return Ok(Vec::new());
        }
        self.reap_batch(expired).await
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let mut call = NEXT_EXPIRY.prepare_invoke();
        call.key(self.keys.expiry(space))
            .arg(self.keys.lease_prefix(space));
        match self.run(call).await? {
            Value::Nil => Ok(None),
            v => Ok(Some(us(int("next_expiry", &v)?))),
        }
    }
}
