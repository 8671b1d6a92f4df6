//! The singleton dispatcher: three candidates campaign for `leaders/dispatcher`; the
//! leader writes to a fenced register with its token; the leader is then frozen (its
//! renewals stall, as in a long GC pause), a standby takes over, and the old leader's
//! late write is refused because its token is lower than one the register has seen.
//!
//! `cargo run -p examples --bin dispatcher [STORE_URL]` (default `memory://`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use liveness::{Election, ElectionConfig, FencingToken, Ttl};

/// What a fenced downstream system does: remember the highest token seen, refuse lower.
#[derive(Default)]
struct FencedRegister {
    highest: AtomicU64,
}

impl FencedRegister {
    fn write(&self, token: FencingToken, what: &str) -> bool {
        let prev = self.highest.fetch_max(token.0, Ordering::SeqCst);
        let ok = token.0 >= prev;
        println!(
            "  register: write {what:?} with token {token} -> {}",
            if ok {
                "accepted"
            } else {
                "REFUSED (stale token)"
            }
        );
        ok
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = examples::store_from_args().await?;
    let ttl = Ttl::from_millis(2000)?;
    let register = FencedRegister::default();

    let a = Election::new(
        store.clone(),
        ElectionConfig::new("dispatcher", "node-a", ttl)?,
    );
    let b = Election::new(
        store.clone(),
        ElectionConfig::new("dispatcher", "node-b", ttl)?,
    );
    let leader = a.campaign().await?;
    println!("node-a leads with token {}", leader.token());
    register.write(leader.token(), "schedule batch 1 (node-a)");

    println!("node-a freezes (its heartbeat stops); node-b campaigns...");
    let old_token = leader.token();
    let lost = leader.cancelled();
    leader.orphan(); // the heartbeat stops; the lease expires by the store's clock
    let next = b.campaign().await?;
    println!(
        "node-b leads with token {} (node-a's signal fired: {})",
        next.token(),
        lost.is_cancelled()
    );
    register.write(next.token(), "schedule batch 2 (node-b)");

    println!("node-a wakes up and, not having looked at its signal, writes anyway:");
    let refused = !register.write(old_token, "schedule batch 1 again (node-a, stale)");
    next.resign().await?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    if refused {
        println!("fencing held: at most one leader's writes took effect at a time");
        Ok(())
    } else {
        Err("a stale leader's write was accepted".into())
    }
}
