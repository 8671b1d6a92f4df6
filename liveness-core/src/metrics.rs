//! The metrics the state machines record, through the [`metrics`] facade.
//!
//! Nothing is recorded unless the application installs a recorder (for example
//! `metrics-exporter-prometheus`); without one every call below is a no-op. Install
//! it before building members, checkers and elections: each binds its metric handles
//! once, when it is built (so a renewal costs two atomic updates, no allocation and
//! no registry look-up).
//!
//! Every metric carries the labels `backend` (the store's [`backend`] name) and
//! `namespace`; some carry one more, named beside each constant. The names follow
//! the Prometheus conventions (`_total` counters, `_seconds` histograms). The project's
//! `docs/metrics.md` lists them in one table.
//!
//! [`backend`]: crate::Store::backend

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label};

use crate::error::{Error, LostCause};
use crate::events::HolderLoss;
use crate::queue_name::QueueName;
use crate::store::Store;
use crate::types::Space;

/// Counter: successful lease renewals (label `role`: `member` or `leader`).
pub const RENEWALS_TOTAL: &str = "liveness_renewals_total";
/// Histogram: the time one renewal call took, successful or not (label `role`).
pub const RENEWAL_SECONDS: &str = "liveness_renewal_seconds";
/// Counter: leases their holder lost (labels `role`, and `reason`: `expired`,
/// `superseded`, `released` as the store answered, `deadline` when the local safety
/// deadline passed first, `fault` after a permanent store error).
pub const LEASES_LOST_TOTAL: &str = "liveness_leases_lost_total";
/// Counter: member leases acquired (label `kind`: `join` for [`Member::join`],
/// `rejoin` for a re-join with a new token after a loss).
///
/// [`Member::join`]: crate::Member::join
pub const JOINS_TOTAL: &str = "liveness_joins_total";
/// Counter: elections won.
pub const LEADERSHIPS_TOTAL: &str = "liveness_leaderships_total";
/// Counter: deaths a checker declared (it won the reap).
pub const DEATHS_TOTAL: &str = "liveness_deaths_total";
/// Counter: items a checker sent back to pending (for a death it declared, or in
/// its sweep of the dead set).
pub const ITEMS_REQUEUED_TOTAL: &str = "liveness_items_requeued_total";
/// Counter: items sent to the dead-letter set, by a checker's requeue (out of
/// attempts) or by a member's `fail`.
pub const ITEMS_DEAD_LETTERED_TOTAL: &str = "liveness_items_dead_lettered_total";
/// Counter: a member's `complete` or `fail` refused because the item is no longer
/// its token's (label `op`: `complete` or `fail`).
pub const FENCED_TOTAL: &str = "liveness_fenced_total";
/// Counter: checker rounds run.
pub const CHECKER_ROUNDS_TOTAL: &str = "liveness_checker_rounds_total";
/// Histogram: the time one checker round took.
pub const CHECKER_ROUND_SECONDS: &str = "liveness_checker_round_seconds";
/// Histogram: the store calls one checker round made.
pub const CHECKER_ROUND_TRIPS: &str = "liveness_checker_round_trips";
/// Counter: store calls of the state machines that failed (labels `op`, the store
/// method, and `kind`: `unavailable`, `backend` or `invalid_input`). The contract's
/// answers (`Held`, `Lost`, `Fenced`) are not errors here: the metrics above count
/// them.
pub const STORE_ERRORS_TOTAL: &str = "liveness_store_errors_total";

/// Counter: jobs a [`Worker`](crate::Worker) ran, by how they ended (label
/// `outcome`: `completed`, `retried`, `dead_lettered`, or `stopped` when the job was
/// stopped before its handler answered, or its answer was refused) and by queue
/// (label [`LABEL_QUEUE`]). The job metrics below carry the queue label too.
pub const JOBS_TOTAL: &str = "liveness_jobs_total";
/// Histogram: the time a worker's handler took on one job, from its start to its
/// answer (a job stopped before it answered is not timed).
pub const JOB_SECONDS: &str = "liveness_job_seconds";
/// Histogram: how long a job waited in its queue before a worker claimed it, by the
/// store's clock (`Item::waited`: from when it became claimable, or due, to the claim);
/// recorded for each job a [`Worker`](crate::Worker) claims from a store that measures
/// it (not etcd or FoundationDB, which have no clock of their own).
pub const JOB_WAIT_SECONDS: &str = "liveness_job_wait_seconds";
/// Gauge: expired leases that a process holding leases in a space saw left unreaped
/// for a whole watch period (label `space`): no checker runs, or the checkers fall
/// that far behind. 0 again once a look finds none left over.
pub const UNREAPED_LEASES: &str = "liveness_unreaped_leases";
/// Gauge: the namespace's items by queue (label [`LABEL_QUEUE`]) and state (label
/// `state`: `pending`, scheduled and
/// retries waiting their backoff included; `owned`; `dead_lettered`), as the checker
/// that runs rounds read them last (every [`CheckerConfig::depth_every`]). A checker
/// that stops running rounds (an elected one that lost its leadership, or stopped)
/// sets them to 0, so the maximum over a fleet's processes is the store's count; so
/// does the next reading for a queue that no longer holds items.
///
/// [`CheckerConfig::depth_every`]: crate::CheckerConfig::depth_every
pub const ITEMS: &str = "liveness_items";
/// The label of the backend's name.
pub const LABEL_BACKEND: &str = "backend";
/// The label of the store handle's namespace.
pub const LABEL_NAMESPACE: &str = "namespace";
/// The label of a job's queue ([`QueueName`]).
pub const LABEL_QUEUE: &str = "queue";

/// Every metric name, for documentation checks and exporters that describe them.
pub const ALL: &[&str] = &[
    RENEWALS_TOTAL,
    RENEWAL_SECONDS,
    LEASES_LOST_TOTAL,
    JOINS_TOTAL,
    LEADERSHIPS_TOTAL,
    DEATHS_TOTAL,
    ITEMS_REQUEUED_TOTAL,
    ITEMS_DEAD_LETTERED_TOTAL,
    FENCED_TOTAL,
    CHECKER_ROUNDS_TOTAL,
    CHECKER_ROUND_SECONDS,
    CHECKER_ROUND_TRIPS,
    STORE_ERRORS_TOTAL,
    JOBS_TOTAL,
    JOB_SECONDS,
    JOB_WAIT_SECONDS,
    UNREAPED_LEASES,
    ITEMS,
];

/// The bucket upper bounds, in seconds, of every `_seconds` histogram: 1 ms to 60 s
/// (a longer time falls in the `+Inf` bucket). An exporter given them (as
/// `liveness check --http` is) exports `_bucket{le=...}`, `_sum` and `_count` series,
/// which add up across the processes of a fleet, where quantiles do not.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The bucket upper bounds of [`CHECKER_ROUND_TRIPS`], a count of store calls.
pub const ROUND_TRIP_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 1000.0];

/// Every histogram of [`ALL`] with its bucket upper bounds: configure an exporter
/// with each pair, and every histogram the framework records is exported with
/// buckets.
pub const HISTOGRAMS: &[(&str, &[f64])] = &[
    (RENEWAL_SECONDS, SECONDS_BUCKETS),
    (CHECKER_ROUND_SECONDS, SECONDS_BUCKETS),
    (CHECKER_ROUND_TRIPS, ROUND_TRIP_BUCKETS),
    (JOB_SECONDS, SECONDS_BUCKETS),
    (JOB_WAIT_SECONDS, SECONDS_BUCKETS),
];

/// A label whose name and value are known at compile time: `("role", "member")`.
type StaticLabel = (&'static str, &'static str);

/// The `backend` and `namespace` labels of one store handle, built once.
#[derive(Clone, Debug)]
pub(crate) struct Labels(Arc<[Label]>);

impl Labels {
    /// The labels of `store`.
    pub(crate) fn of(store: &dyn Store) -> Labels {
        Labels(Arc::from([
            Label::new(LABEL_BACKEND, store.backend()),
            Label::new(
                LABEL_NAMESPACE,
                store.issuer().namespace().as_str().to_owned(),
            ),
        ]))
    }

    /// These labels and a job's queue ([`LABEL_QUEUE`]).
    pub(crate) fn queue(&self, queue: QueueName) -> Labels {
        let mut labels = self.0.to_vec();
        labels.push(Label::new(LABEL_QUEUE, queue.as_str().to_owned()));
        Labels(Arc::from(labels))
    }

    fn with(&self, extra: &[StaticLabel]) -> Vec<Label> {
        let mut labels = self.0.to_vec();
        labels.extend(extra.iter().map(|&(k, v)| Label::new(k, v)));
        labels
    }

    /// The counter `name` with these labels and `extra` ones. Registers it: for rare
    /// events, or once per handle.
    pub(crate) fn counter(&self, name: &'static str, extra: &[StaticLabel]) -> Counter {
        metrics::counter!(name, self.with(extra))
    }

    /// The histogram `name` with these labels and `extra` ones.
    pub(crate) fn histogram(&self, name: &'static str, extra: &[StaticLabel]) -> Histogram {
        metrics::histogram!(name, self.with(extra))
    }

    /// The gauge `name` with these labels and `extra` ones.
    pub(crate) fn gauge(&self, name: &'static str, extra: &[StaticLabel]) -> Gauge {
        metrics::gauge!(name, self.with(extra))
    }

    /// The gauge `name` with these labels and `space`'s (label `space`).
    pub(crate) fn space_gauge(&self, name: &'static str, space: &Space) -> Gauge {
        let mut labels = self.0.to_vec();
        labels.push(Label::new("space", space.as_str().to_owned()));
        metrics::gauge!(name, labels)
    }
}

/// Which kind of holder a heartbeat keeps alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A [`Member`](crate::Member).
    Member,
    /// A [`Leadership`](crate::Leadership).
    Leader,
}

impl Role {
    fn label(self) -> StaticLabel {
        (
            "role",
            match self {
                Role::Member => "member",
                Role::Leader => "leader",
            },
        )
    }
}

/// The handles of one lease holder's heartbeat, built once per member or leadership.
#[derive(Clone)]
pub(crate) struct HolderMetrics {
    labels: Labels,
    role: Role,
    renewals: Counter,
    renewal_seconds: Histogram,
}

impl std::fmt::Debug for HolderMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HolderMetrics")
            .field("labels", &self.labels)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl HolderMetrics {
    /// The handles of a holder of `role` on `store`.
    pub(crate) fn new(store: &dyn Store, role: Role) -> HolderMetrics {
        let labels = Labels::of(store);
        HolderMetrics {
            renewals: labels.counter(RENEWALS_TOTAL, &[role.label()]),
            renewal_seconds: labels.histogram(RENEWAL_SECONDS, &[role.label()]),
            labels,
            role,
        }
    }

    /// The labels of the holder's store.
    pub(crate) fn labels(&self) -> &Labels {
        &self.labels
    }

    /// A renewal call answered after `took`; `ok` when it renewed the lease.
    pub(crate) fn renewal(&self, took: Duration, ok: bool) {
        self.renewal_seconds.record(took.as_secs_f64());
        if ok {
            self.renewals.increment(1);
        }
    }

    /// The holder lost its lease for `reason`.
    pub(crate) fn lost(&self, reason: HolderLoss) {
        let reason = match reason {
            HolderLoss::Store(LostCause::Expired) => "expired",
            HolderLoss::Store(LostCause::Superseded) => "superseded",
            HolderLoss::Store(LostCause::Released) => "released",
            HolderLoss::Store(LostCause::Failover) => "failover",
            HolderLoss::Store(LostCause::GaveUp) | HolderLoss::Deadline => "deadline",
            HolderLoss::Fault => "fault",
            HolderLoss::StoreLostState => "store_lost_state",
            HolderLoss::Stalled | HolderLoss::Store(LostCause::Stalled) => "stalled",
        };
        self.labels
            .counter(LEASES_LOST_TOTAL, &[self.role.label(), ("reason", reason)])
            .increment(1);
    }
}

/// The handles of one checker, built once.
#[derive(Clone)]
pub(crate) struct CheckerMetrics {
    pub(crate) rounds: Counter,
    pub(crate) round_seconds: Histogram,
    pub(crate) round_trips: Histogram,
    pub(crate) deaths: Counter,
    pub(crate) requeued: Counter,
    pub(crate) dead_lettered: Counter,
    /// The labels of the [`ITEMS`] gauges.
    labels: Labels,
    /// [`ITEMS`] of each queue reported so far: pending, owned, dead-lettered.
    depth: Arc<std::sync::Mutex<std::collections::BTreeMap<QueueName, [Gauge; 3]>>>,
}

impl std::fmt::Debug for CheckerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckerMetrics").finish_non_exhaustive()
    }
}

impl CheckerMetrics {
    /// The handles of a checker on `store`.
    pub(crate) fn new(store: &dyn Store) -> CheckerMetrics {
        let labels = Labels::of(store);
        CheckerMetrics {
            rounds: labels.counter(CHECKER_ROUNDS_TOTAL, &[]),
            round_seconds: labels.histogram(CHECKER_ROUND_SECONDS, &[]),
            round_trips: labels.histogram(CHECKER_ROUND_TRIPS, &[]),
            deaths: labels.counter(DEATHS_TOTAL, &[]),
            requeued: labels.counter(ITEMS_REQUEUED_TOTAL, &[]),
            dead_lettered: labels.counter(ITEMS_DEAD_LETTERED_TOTAL, &[]),
            labels,
            depth: Arc::default(),
        }
    }

    /// Sets [`ITEMS`] to `counts`, each queue's (`None`: zero, the checker no longer
    /// reports). A queue reported before and missing from `counts` holds no item
    /// any more: zero.
    pub(crate) fn set_depth(&self, counts: Option<&[crate::item::QueueCounts]>) {
        let mut depth = crate::sync::lock(&self.depth);
        let counts = counts.unwrap_or_default();
        for c in counts {
            depth.entry(c.queue).or_insert_with(|| {
                let labels = self.labels.queue(c.queue);
                ["pending", "owned", "dead_lettered"]
                    .map(|state| labels.gauge(ITEMS, &[("state", state)]))
            });
        }
        for (queue, [pending, owned, dead]) in depth.iter() {
            let c = counts
                .iter()
                .find(|c| c.queue == *queue)
                .map(|c| c.counts)
                .unwrap_or_default();
            pending.set(c.pending as f64);
            owned.set(c.owned as f64);
            dead.set(c.dead_lettered as f64);
        }
    }
}

/// The `kind` label of a store error, or `None` for the contract's answers (`Held`,
/// `Lost`, `Fenced`), which are not errors of the store.
pub(crate) fn error_kind(error: &Error) -> Option<&'static str> {
    match error {
        Error::Unavailable { .. } => Some("unavailable"),
        Error::Backend { .. } => Some("backend"),
        Error::InvalidInput { .. } => Some("invalid_input"),
        Error::Held { .. } | Error::Lost { .. } | Error::Fenced { .. } => None,
    }
}
