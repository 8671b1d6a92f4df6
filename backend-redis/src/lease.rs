//! `impl LeaseStore for RedisStore`: each method runs its own script (declared next
//! to it), or forwards to the death finding of `deaths.rs` and the batches of
//! `batch.rs`. The input arrives checked (the core's `CheckInput`).

use std::time::Duration;

use liveness_core::{
    async_trait, Acquire, BatchResult, DeadToken, DeathRecord, ExpiredLease, FencingToken,
    HolderId, JoinAsk, Key, Lease, LeaseInfo, LeaseStore, Name, Namespace, Page, Result, Space,
    StoreInfo, StoreTime, Ttl,
};
use redis::{Script, ScriptInvocation, Value};

use crate::core::{
    array, int, key_text, lost, record, renewed, scripts, status_of, text, uint, unexpected, us,
    RedisStore, ScriptCall,
};
use crate::keys::Keys;

scripts! {
    ACQUIRE = "acquire", pub(crate) RENEW = renewal "renew", RELEASE = "release",
    INSPECT = "inspect", MEMBERS = "members", STORE_TIME = "store_time",
    NEXT_EXPIRY = "next_expiry", JOIN_SESSION = "join_session",
}

/// The renew script (`KEYS`: lease, expiry index, token counter; `ARGV`: name,
/// token, ttl ms).
pub fn renew_script() -> &'static Script {
    &RENEW
}

/// The `KEYS` of a renewal of `key` in `namespace`.
pub fn renew_keys(namespace: &Namespace, key: &Key) -> [String; 3] {
    let keys = Keys::new(namespace);
    [keys.lease(key), keys.expiry(key.space()), keys.tokens()]
}

fn renew_call<'a>(keys: &Keys, lease: &Lease) -> ScriptInvocation<'a> {
    let mut call = RENEW.prepare_invoke();
    call.key(keys.lease(&lease.key))
        .key(keys.expiry(lease.key.space()))
        .key(keys.tokens())
        .arg(lease.key.name().as_str())
        .arg(lease.token.0)
        .arg(lease.ttl.as_millis());
    call
}

/// Reads the stored fields of the lease on `key` that follow in `fields`: `{holder,
/// token, ttl ms, µs left (-1 when expired), session lease key or ''}`, as
/// `inspect.lua` answers them and as each group of `members.lua` has them after its
/// name. A missing field reads as nil, which fails as a corrupt record.
fn lease_info(
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
    Ok(LeaseInfo {
        session,
        key,
        holder,
        token,
        ttl,
        status: status_of(left),
    })
}

impl RedisStore {
    /// The answer of one join from its reply (the prelude's `join_one`): `{1, token,
    /// µs the session has left}` or `{0, holder, token}`.
    pub(crate) fn joined(
        &self,
        op: &'static str,
        session: &Lease,
        key: &Key,
        holder: &HolderId,
        reply: Value,
    ) -> Result<Lease> {
        let mut fields = array(op, reply)?.into_iter();
        let granted = self.taken(op, key, holder, session.ttl, &mut fields)?;
        let left = int(op, &fields.next().unwrap_or(Value::Nil))?;
        Ok(Lease {
            expires_in: us(left),
            ..granted
        })
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        let mut call = ScriptCall::default();
        call.key(self.keys.lease(key))
            .key(self.keys.expiry(key.space()))
            .key(self.keys.tokens())
            .key(self.keys.dead())
            .arg(key.name().as_str())
            .arg(holder.as_str())
            .arg(ttl.as_millis())
            .arg(key_text(key))
            .arg(self.info.caps.death_retention);
        let reply = self.run_issuing(&ACQUIRE, call).await?;
        self.acquired("acquire", key, holder, ttl, reply)
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        self.acquire_batch(asks).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let v = self.run(renew_call(&self.keys, lease)).await?;
        renewed("renew", lease, int("renew", &v)?)
    }

    async fn join_session(&self, session: &Lease, key: &Key, holder: &HolderId) -> Result<Lease> {
        let mut call = ScriptCall::default();
        call.key(self.keys.lease(&session.key))
            .key(self.keys.lease(key))
            .key(self.keys.expiry(key.space()))
            .key(self.keys.tokens())
            .key(self.keys.dead())
            .arg(session.token.0)
            .arg(key.name().as_str())
            .arg(holder.as_str())
            .arg(key_text(key))
            .arg(self.info.caps.death_retention);
        let reply = self.run_issuing(&JOIN_SESSION, call).await?;
        let mut parts = array("join_session", reply)?.into_iter();
        let code = int("join_session", &parts.next().unwrap_or(Value::Nil))?;
        if code < 0 {
            return Err(lost(session, code));
        }
        self.joined(
            "join_session",
            session,
            key,
            holder,
            Value::Array(std::iter::once(Value::Int(code)).chain(parts).collect()),
        )
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

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        self.reap_one(key, token).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        if expired.is_empty() {
            return Ok(Vec::new());
        }
        self.reap_batch(expired).await
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.dead_set(limit).await
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let mut call = MEMBERS.prepare_invoke();
        call.key(self.keys.members(space))
            .arg(after.map_or_else(|| "-".to_owned(), |k| format!("({}", k.name())))
            .arg(limit)
            .arg(self.keys.lease_prefix(space));
        let flat = array("members", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 6);
        let mut it = flat.into_iter();
        while let Some(name) = it.next() {
            let name = Name::new(text("members", name)?)
                .map_err(|_| unexpected("members", "an invalid stored name"))?;
            out.push(lease_info(
                "members",
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

    async fn store_time(&self) -> Result<StoreTime> {
        // The counter key only routes the call to the namespace's node on a cluster
        // (each node has its own clock); the script reads no key.
        let mut call = STORE_TIME.prepare_invoke();
        call.key(self.keys.tokens());
        let now = uint("store_time", &self.run(call).await?)?;
        Ok(self.high_water.observe(Duration::from_micros(now)))
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
