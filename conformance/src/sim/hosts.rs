//! Session hosts: simulated processes each holding one session lease
//! ([`Session::open`]) that several members ride ([`Session::join`]). Faults hit the
//! whole process: a kill ends every task of it at once (the session and all its
//! members stop, nothing is released), a freeze stops its session's renewals and
//! its members' work together, and its store handle loses replies as any other.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::{CancellationToken, Member, Session, SessionConfig};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::process::{
    runtime, spawn_thread, wait_busy, worker, Command, Process, Shared, Start, Work,
};
use crate::faults::FaultyStore;

/// Starts session host `i`: `member-i`, whose members are `member-i-m0`, ….
pub(super) fn spawn_host(i: usize, store: Arc<FaultyStore>, seed: u64, shared: Shared) -> Process {
    spawn_thread(format!("member-{i}"), store, seed, shared, |mut start| {
        let mut incarnation = 0u64;
        loop {
            let rt = runtime();
            let killed = rt.block_on(host(&mut start, incarnation));
            // A kill: every task of this incarnation (the session's heartbeat, the
            // members, their workers mid-step) ends here, without a word to the
            // store. Calls already sent still land: they run on the store's side.
            drop(rt);
            if !killed {
                return;
            }
            incarnation += 1;
        }
    })
}

/// One member riding the host's session, with its workers.
struct Seat {
    name: String,
    member: Member,
    stop: CancellationToken,
    workers: Vec<JoinHandle<()>>,
}

/// How many ttl a host tries to join one of its members' names before it reports the
/// name as stranded.
const TAKE_TTLS: u32 = 10;

impl Seat {
    /// Joins `name` into `session` (retrying while faults refuse it) and starts its
    /// workers. A name still refused after [`TAKE_TTLS`] ttl is a stranded name (a
    /// member gone without handing it back): the host panics with the refusals it
    /// saw, which the run reports, instead of trying for ever.
    async fn take(session: &Session, name: String, work: &Work) -> Seat {
        let config = &work.shared.config;
        let give_up = Instant::now() + config.ttl.duration() * TAKE_TTLS;
        let mut refusals: Vec<String> = Vec::new();
        let member = loop {
            match session.join(&name).await {
                Ok(m) => break m,
                Err(e) if Instant::now() < give_up => {
                    if refusals.last() != Some(&e.to_string()) {
                        refusals.push(e.to_string());
                    }
                    tokio::time::sleep(config.ttl.duration() / 4).await;
                }
                Err(e) => panic!(
                    "{name} was refused for {TAKE_TTLS} ttl, last {e}; refusals seen: {refusals:?}"
                ),
            }
        };
        let work = Work {
            stop: CancellationToken::new(),
            ..work.clone()
        };
        let workers = (0..config.workers)
            .map(|_| tokio::spawn(worker(member.clone(), work.clone())))
            .collect();
        Seat {
            name,
            member,
            stop: work.stop,
            workers,
        }
    }

    /// Drops the member and its workers where they stand, without a leave.
    fn abort(self) {
        for w in &self.workers {
            w.abort();
        }
        drop(self.member);
    }

    /// Stops the workers (after the member left) and waits for them.
    async fn end(self) {
        self.stop.cancel();
        for w in self.workers {
            let _ = w.await;
        }
    }
}

/// One incarnation of a host: opens the session, seats its members, obeys commands.
/// Returns true when killed (the caller starts the next incarnation).
async fn host(start: &mut Start, incarnation: u64) -> bool {
    let shared = start.shared.clone();
    let config = shared.config.clone();
    let work = Work {
        shared: shared.clone(),
        pauser: start.pauser.clone(),
        stop: CancellationToken::new(),
        rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(
            start.seed.wrapping_add(incarnation),
        ))),
    };
    let session = open(start).await;
    let riders = config.sessions.unwrap_or(1).max(1);
    let mut seats = Vec::with_capacity(riders);
    for j in 0..riders {
        seats.push(Seat::take(&session, format!("{}-m{j}", start.name), &work).await);
    }
    loop {
        match start.obey().await {
            Some(Command::Kill) => return true,
            Some(Command::Leave(grace)) => {
                // One member leaves alone in the middle of its jobs and joins again;
                // the session and the other members go on untouched.
                wait_busy(&start.pauser.busy, start.wait()).await;
                let seat = seats.remove(0);
                let _ = seat.member.clone().leave(grace).await;
                let name = seat.name.clone();
                seat.end().await;
                seats.push(Seat::take(&session, name, &work).await);
            }
            Some(Command::Drop) => {
                // One member is dropped with its workers, mid-job: its work is told
                // to stop at once, and after the margin its items go back and its
                // name is free (the join retries while it answers `Held`).
                wait_busy(&start.pauser.busy, start.wait()).await;
                let seat = seats.remove(0);
                let name = seat.name.clone();
                seat.abort();
                seats.push(Seat::take(&session, name, &work).await);
            }
            _ => {
                let _ = session.close(config.step()).await;
                for seat in seats {
                    seat.end().await;
                }
                return false;
            }
        }
    }
}

/// Opens the host's session, retrying until it succeeds: faults may be armed, and
/// after a kill the earlier incarnation's session holds the name until it expires.
async fn open(start: &Start) -> Session {
    let config = &start.shared.config;
    loop {
        let session = SessionConfig::new(&start.name, config.ttl)
            .unwrap_or_else(|e| panic!("session config: {e}"))
            .events(start.shared.bus.clone())
            .clock(start.pauser.clock.clone());
        match Session::open(start.store.clone(), session).await {
            Ok(s) => return s,
            Err(_) => tokio::time::sleep(pause(config.ttl.duration())).await,
        }
    }
}

/// How long a refused open waits before trying again.
fn pause(ttl: Duration) -> Duration {
    ttl / 4
}
