//! A death timed as a running checker declares it: a checker on a store, its events
//! watched, and the instants at which the members of one dying set are declared dead
//! (each one's [`Event::Died`]). The sessions benches time with it a process that
//! stops renewing: from its last renewal to the last of its members declared.

use std::sync::Arc;
use std::time::{Duration, Instant};

use liveness_core::{
    Checker, CheckerConfig, CheckerHandle, Event, EventBus, FencingToken, Key, Store,
};
use tokio::sync::broadcast::{self, error::RecvError};

/// Events a watch buffers before it misses some: more than the members of any one
/// process the benches kill.
const BUFFER: usize = 1 << 17;

/// A running checker whose declared deaths are watched.
#[derive(Debug)]
pub struct DeathWatch {
    events: broadcast::Receiver<Event>,
    checker: CheckerHandle,
}

/// What a watch saw of one dying set.
#[derive(Clone, Debug, Default)]
pub struct Declared {
    /// How many of the set were declared dead.
    pub count: usize,
    /// When the first of them was.
    pub first: Option<Instant>,
    /// When the last of them was.
    pub last: Option<Instant>,
    /// Events the watch missed because it fell behind the checker (then `count` may
    /// fall short of what the checker declared).
    pub missed: u64,
}

impl DeathWatch {
    /// Starts a checker on `store` with the default configuration (sessions watched)
    /// and `check_every` as its longest pause, its events watched from now on.
    pub fn start(store: Arc<dyn Store>, check_every: Duration) -> DeathWatch {
        let bus = EventBus::new(BUFFER);
        let events = bus.subscribe();
        let config = CheckerConfig::default()
            .check_every(check_every)
            .events(bus);
        DeathWatch {
            events,
            checker: Checker::new(store, config).spawn(),
        }
    }

    /// Waits until `count` deaths for which `dying(key, token)` holds have been
    /// declared, or until `give_up` has passed: what was seen of them.
    pub async fn declared<F>(&mut self, count: usize, give_up: Duration, dying: F) -> Declared
    where
        F: Fn(&Key, FencingToken) -> bool,
    {
        let until = tokio::time::Instant::now() + give_up;
        let mut seen = Declared::default();
        while seen.count < count {
            let event = match tokio::time::timeout_at(until, self.events.recv()).await {
                Err(_) | Ok(Err(RecvError::Closed)) => break,
                Ok(Err(RecvError::Lagged(n))) => {
                    seen.missed += n;
                    continue;
                }
                Ok(Ok(event)) => event,
            };
            if let Event::Died { key, token, .. } = event {
                if dying(&key, token) {
                    let now = Instant::now();
                    seen.first.get_or_insert(now);
                    seen.last = Some(now);
                    seen.count += 1;
                }
            }
        }
        seen
    }

    /// Stops the checker.
    pub async fn stop(self) {
        self.checker.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::session_with_members;
    use liveness_core::Ttl;
    use std::collections::HashSet;

    #[tokio::test]
    async fn the_members_of_a_dead_session_are_seen_declared() {
        let store = crate::memory_store();
        let ttl = Ttl::new(Duration::from_millis(200)).unwrap_or_else(|e| panic!("{e}"));
        let (_session, members) = session_with_members(&store, "p0", "watch", ttl, 5).await;
        let tokens: HashSet<_> = members.iter().map(|m| m.token).collect();
        let started = Instant::now();
        let mut watch = DeathWatch::start(Arc::new(store), Duration::from_millis(50));
        let seen = watch
            .declared(5, Duration::from_secs(10), |_, token| {
                tokens.contains(&token)
            })
            .await;
        watch.stop().await;
        assert_eq!((seen.count, seen.missed), (5, 0));
        let (first, last) = (seen.first.unwrap_or(started), seen.last.unwrap_or(started));
        assert!(first <= last);
        assert!(last.duration_since(started) >= Duration::from_millis(100));
    }
}
