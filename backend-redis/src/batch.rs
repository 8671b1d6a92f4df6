//! The native batches: `acquire_many`, `join_session_many`, `renew_many`,
//! `reap_many` and `sweep_many`, each one script for the whole batch (one
//! round trip, one server instant; `sweep_many` one per `max_batch` tokens,
//! or fewer when dead sessions' members fill a script). They are the only path: the
//! single `acquire`, `join_session`, `renew`, `reap` and `sweep` of the
//! core's `Store` facade are batches of one. Inherent methods the trait impls of
//! `lease.rs` and `items.rs` call with batches the core's `CheckInput` checked.

use liveness_core::{
    Acquire, BatchResult, FencingToken, HolderId, JoinAsk, Key, Lease, Namespace, Result, Space,
    Sweep,
};
use redis::{Cmd, Script, Value};

use crate::core::{
    array, ids, int, key_text, lost, renewed, scripts, swept_members, unexpected, us, RedisStore,
    ScriptCall,
};
use crate::items::dead_letter_retention_ms;
use crate::keys::Keys;

scripts! {
    ACQUIRE_MANY = "acquire_many", RENEW_MANY = renewal "renew_many", REAP_MANY = "reap_many",
    SWEEP_MANY = queues dead_letters "sweep_many", JOIN_SESSION_MANY = "join_session_many",
}

/// The renewal script, `renew_many.lua` (`KEYS`: the expiry index of each run of
/// leases of one space; `ARGV`, per run: the space's lease key prefix, the run's
/// lease count, then name, token and ttl ms of each lease).
pub fn renew_script() -> &'static Script {
    &RENEW_MANY
}

/// The expiry index (the one key) and the lease key prefix (the first argument) of a
/// renewal of leases of `space` in `namespace`, as one run of `renew_many.lua`.
pub fn renew_run(namespace: &Namespace, space: &Space) -> (String, String) {
    let keys = Keys::new(namespace);
    (keys.expiry(space), keys.lease_prefix(space))
}

impl RedisStore {
    /// Acquires every entry of `asks` (a checked batch) in one script: one round
    /// trip, one server instant.
    pub(crate) async fn acquire_batch(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        let mut call = ScriptCall::default();
        call.key(self.keys.tokens())
            .key(self.keys.dead())
            .arg(self.info.caps.death_retention);
        for ask in asks {
            call.key(self.keys.lease(&ask.key))
                .key(self.keys.expiry(ask.key.space()))
                .arg(ask.key.name().as_str())
                .arg(ask.holder.as_str())
                .arg(ask.ttl.as_millis())
                .arg(key_text(&ask.key));
        }
        const OP: &str = "acquire_many";
        let replies = array(OP, self.run_issuing(&ACQUIRE_MANY, call).await?)?;
        if replies.len() != asks.len() {
            return Err(unexpected(OP, "a reply of another length"));
        }
        Ok(asks
            .iter()
            .zip(replies)
            .map(|(ask, reply)| {
                // Each reply: `{1, token}` taken, or `{0, holder, token}` held.
                let mut fields = array(OP, reply)?.into_iter();
                self.taken(OP, &ask.key, &ask.holder, ask.ttl, &mut fields)
            })
            .collect())
    }

    /// Joins every entry of `asks` (a checked batch) into `session` in one script
    /// (the session judged once): one round trip, one server instant.
    pub(crate) async fn join_batch(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        let mut call = ScriptCall::default();
        call.key(self.keys.lease(&session.key))
            .key(self.keys.tokens())
            .key(self.keys.dead())
            .arg(session.token.0)
            .arg(self.info.caps.death_retention);
        for (key, holder) in asks {
            call.key(self.keys.lease(key))
                .key(self.keys.expiry(key.space()))
                .arg(key.name().as_str())
                .arg(holder.as_str())
                .arg(key_text(key));
        }
        const OP: &str = "join_session_many";
        let reply = array(OP, self.run_issuing(&JOIN_SESSION_MANY, call).await?)?;
        let mut reply = reply.into_iter();
        let code = int(OP, &reply.next().unwrap_or(Value::Nil))?;
        if code < 0 {
            return Ok(asks.iter().map(|_| Err(lost(session, code))).collect());
        }
        let replies = array(OP, reply.next().unwrap_or(Value::Nil))?;
        if code != 1 || replies.len() != asks.len() {
            return Err(unexpected(OP, "a reply of another length"));
        }
        Ok(asks
            .iter()
            .zip(replies)
            .map(|((key, holder), reply)| self.joined(OP, session, key, holder, reply))
            .collect())
    }

    /// The answer of one join from its reply (the prelude's `join_one`): `{1, token,
    /// µs the session has left}` or `{0, holder, token}`.
    fn joined(
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
        Ok(granted.with_expires_in(us(left)))
    }

    /// Renews `leases` (a checked, non-empty batch of this store's leases) in one
    /// script.
    pub(crate) async fn renew_batch(&self, leases: &[Lease]) -> BatchResult<Lease> {
        // One script for the whole batch: one round trip, one server instant. The
        // command is written straight into one buffer, without a buffer per argument.
        // Leases come in runs of the same space (usually one run): per run, its expiry
        // index as a key, and its lease keys' prefix, count and leases as arguments;
        // the script derives each lease key (prefix and name, same hash slot), so a
        // lease costs the server three arguments, not five.
        let script = &*RENEW_MANY;
        let mut runs: Vec<(&Space, usize)> = Vec::new();
        for lease in leases {
            let space = lease.key.space();
            match runs.last_mut() {
                Some((s, n)) if *s == space => *n += 1,
                _ => runs.push((space, 1)),
            }
        }
        let mut call = Cmd::with_capacity(
            3 + 3 * runs.len() + 3 * leases.len(),
            64 + 96 * runs.len() + 48 * leases.len(),
        );
        call.arg("EVALSHA").arg(script.get_hash()).arg(runs.len());
        for (space, _) in &runs {
            call.arg(self.keys.expiry(space));
        }
        let mut rest = leases.iter();
        for (space, n) in &runs {
            call.arg(self.keys.lease_prefix(space)).arg(*n);
            for lease in rest.by_ref().take(*n) {
                call.arg(lease.key.name().as_str())
                    .arg(lease.token.0)
                    .arg(lease.ttl.as_millis());
            }
        }
        let codes = array("renew_many", self.run_script(script, &call).await?)?;
        if codes.len() != leases.len() {
            return Err(unexpected("renew_many", "a reply of another length"));
        }
        Ok(leases
            .iter()
            .zip(codes)
            .map(|(lease, code)| renewed("renew_many", lease, int("renew_many", &code)?))
            .collect())
    }

    /// Reaps every entry of `expired` (a checked, non-empty batch) in one script.
    pub(crate) async fn reap_batch(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        let mut call = REAP_MANY.prepare_invoke();
        call.key(self.keys.dead())
            .arg(self.info.caps.death_retention);
        for (key, token) in expired {
            call.key(self.keys.lease(key))
                .key(self.keys.expiry(key.space()))
                .arg(key.name().as_str())
                .arg(token.0)
                .arg(key_text(key));
        }
        let codes = array("reap_many", self.run(call).await?)?;
        if codes.len() != expired.len() {
            return Err(unexpected("reap_many", "a reply of another length"));
        }
        Ok(codes
            .iter()
            .map(|c| int("reap_many", c).map(|c| c == 1))
            .collect())
    }

    /// Sweeps the items of every dead token of `tokens`: requeued, or dead-lettered
    /// once out of attempts, and the token leaves the dead set; a dead session's token
    /// first declares its riding members dead, at most `max_batch` of them per call,
    /// and stays in the dead set while any remain. One script for up to `max_batch`
    /// tokens, which starts a token only while it has declared fewer than `max_batch`
    /// members dead (so it declares fewer than `2 * max_batch` dead) and answers those
    /// it swept; the rest go in the next one.
    pub(crate) async fn sweep_batch(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        let max = self.info.caps.max_batch.max(1);
        let mut out = Vec::with_capacity(tokens.len());
        while out.len() < tokens.len() {
            let chunk = &tokens[out.len()..tokens.len().min(out.len() + max)];
            let mut call = SWEEP_MANY.prepare_invoke();
            call.key(self.keys.dead())
                .key(self.keys.owned_count())
                .key(self.keys.dead_letters())
                .key(self.keys.dead_letter_times())
                .arg(self.keys.item_prefix())
                .arg(max)
                .arg(dead_letter_retention_ms(
                    self.info.caps.dead_letter_retention,
                ));
            for token in chunk {
                call.key(self.keys.owned(*token)).arg(token.0);
            }
            let answers = array("sweep_many", self.run(call).await?)?;
            // At least the first token, at most all of them.
            if answers.is_empty() || answers.len() > chunk.len() {
                return Err(unexpected("sweep_many", "a reply of another length"));
            }
            for answer in answers {
                out.push(array("sweep_many", answer).and_then(|parts| {
                    let mut parts = parts.into_iter();
                    let mut next = || parts.next().unwrap_or(Value::Nil);
                    let requeued = ids("sweep_many", next())?;
                    let dead_lettered = ids("sweep_many", next())?;
                    let members = swept_members("sweep_many", next())?;
                    Ok(Sweep::new(requeued, dead_lettered).with_members(members))
                }));
            }
        }
        Ok(out)
    }
}
