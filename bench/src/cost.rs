//! The round-cost check of the `expired` bullet: a checker round's work must not grow
//! with the number of live leases ([`check_round_cost`], [`assert_round_cost`]), counted
//! by the store's own work meter where it has one ([`metered`]), else timed.

use super::*;

/// A reading of a counter of the work a store did (rows, entries or keys it read) that
/// only goes up. A store that can count its own work hands one to [`CostCheck::work`]:
/// unlike wall time, it is deterministic, so a test may judge it.
pub type WorkMeter = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A [`Factory`] of `make()` stores and the [`WorkMeter`] that reads `work` of the
/// latest one made, for a store that counts its own work (rows it read): pass the
/// meter to [`CostCheck::work`] and the factory to [`check_round_cost`]. The check
/// measures one fresh store per size, one after the other, so the meter always reads
/// the store being measured. The stores stand behind [`liveness_core::CheckInput`],
/// as every [`crate::factory`] makes them.
///
/// ```ignore
/// let (factory, meter) = bench::metered(MyStore::new, MyStore::rows_read);
/// bench::assert_round_cost(factory, &CostCheck::deterministic(vec![1_000, 10_000], Some(meter)));
/// ```
pub fn metered<S: Store + 'static>(
    make: impl Fn() -> S + Send + Sync + 'static,
    work: fn(&S) -> u64,
) -> (Factory, WorkMeter) {
    let latest: Arc<Mutex<Option<Arc<S>>>> = Arc::default();
    let made = latest.clone();
    let factory = crate::factory(move || {
        let store = Arc::new(make());
        *lock(&made) = Some(store.clone());
        async move { Some(store as Arc<dyn Store>) }
    });
    let meter: WorkMeter = Arc::new(move || lock(&latest).as_deref().map_or(0, work));
    (factory, meter)
}

/// What [`check_round_cost`] measures, and how much growth it allows.
#[derive(Clone)]
pub struct CostCheck {
    /// Live member counts, each on a fresh store; the first is the baseline every
    /// other one is compared with.
    pub live: Vec<usize>,
    /// Expired members each measured round reaps (the same at every size).
    pub expired: usize,
    /// Rounds measured per size; the figures compared are their medians.
    pub rounds: usize,
    /// The largest allowed ratio of a size's cost to the baseline's. `None`: the
    /// square root of the ratio of their live counts (midway, on a log scale, between
    /// a cost that stays flat and one that grows as fast as the live leases: 10 for
    /// 1,000 against 100,000).
    pub max_ratio: Option<f64>,
    /// Judge the rounds' median wall time too. Timing is noisy, so it belongs in a
    /// bench binary (`--check-cost` turns it on), never in a test: tests judge round
    /// trips and [`CostCheck::work`], which are deterministic.
    pub judge_time: bool,
    /// The store's own work counter, when it has one (see [`WorkMeter`]). Without it,
    /// only round trips (and, with [`CostCheck::judge_time`], time) are judged, and a
    /// store that scans inside one call is caught only by time.
    pub work: Option<WorkMeter>,
}

impl Default for CostCheck {
    /// 1,000 against 100,000 live members, 10 expired per round, 5 rounds, the
    /// square-root limit, time judged, no work meter.
    fn default() -> Self {
        CostCheck {
            live: vec![1_000, 100_000],
            expired: 10,
            rounds: 5,
            max_ratio: None,
            judge_time: true,
            work: None,
        }
    }
}

impl CostCheck {
    /// The check a test may run: round trips and `work` judged, time only printed.
    pub fn deterministic(live: Vec<usize>, work: Option<WorkMeter>) -> CostCheck {
        CostCheck {
            live,
            judge_time: false,
            work,
            ..CostCheck::default()
        }
    }

    fn limit(&self, baseline: usize, live: usize) -> f64 {
        let by_size = (live.max(1) as f64 / baseline.max(1) as f64).sqrt();
        self.max_ratio.unwrap_or(by_size).max(1.0)
    }
}

impl std::fmt::Debug for CostCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CostCheck")
            .field("live", &self.live)
            .field("expired", &self.expired)
            .field("rounds", &self.rounds)
            .field("max_ratio", &self.max_ratio)
            .field("judge_time", &self.judge_time)
            .field("work", &self.work.as_ref().map(|_| "meter"))
            .finish()
    }
}

/// One size's medians over [`CostCheck::rounds`] checker rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostSample {
    /// Live members in the store.
    pub live: usize,
    /// Expired members each round reaped.
    pub expired: usize,
    /// Store calls per round.
    pub round_trips: u64,
    /// Work per round, by [`CostCheck::work`].
    pub work: Option<u64>,
    /// Wall time per round.
    pub time: Duration,
}

/// What a cost is measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Store calls per round (deterministic).
    RoundTrips,
    /// The store's own work counter per round (deterministic).
    Work,
    /// Wall time per round (judged only with [`CostCheck::judge_time`]).
    Time,
}

/// A cost that grew with live leases beyond the allowed ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Growth {
    /// What grew.
    pub measure: Measure,
    /// The baseline's live count.
    pub baseline_live: usize,
    /// The baseline's cost (calls, work units, or seconds).
    pub baseline: f64,
    /// The larger size's live count.
    pub live: usize,
    /// Its cost, in the same unit.
    pub cost: f64,
    /// The largest ratio allowed between them.
    pub max_ratio: f64,
}

/// The result of [`check_round_cost`]: the samples, and every growth beyond the limit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CostReport {
    /// One sample per live count, in [`CostCheck::live`] order.
    pub samples: Vec<CostSample>,
    /// The costs that grew too much; empty when the check passed.
    pub growth: Vec<Growth>,
}

impl CostReport {
    /// True when no judged cost grew beyond its limit.
    pub fn passed(&self) -> bool {
        self.growth.is_empty()
    }
}

/// One line per sample, one per growth, then `PASS` or `FAIL`.
impl std::fmt::Display for CostReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for s in &self.samples {
            write!(
                f,
                "round cost   live={:<7} expired={:<4} round_trips={:<4} time={:>10.3?}",
                s.live, s.expired, s.round_trips, s.time
            )?;
            match s.work {
                Some(w) => writeln!(f, " work={w}")?,
                None => writeln!(f)?,
            }
        }
        for g in &self.growth {
            let show = |v: f64| match g.measure {
                Measure::Time => format!("{:.3?}", Duration::from_secs_f64(v)),
                Measure::RoundTrips | Measure::Work => format!("{v}"),
            };
            writeln!(
                f,
                "GREW         {:?}: {} at live={} against {} at live={} (ratio {:.1} > allowed {:.1})",
                g.measure,
                show(g.cost),
                g.live,
                show(g.baseline),
                g.baseline_live,
                g.cost / g.baseline.max(f64::MIN_POSITIVE),
                g.max_ratio
            )?;
        }
        write!(
            f,
            "round cost check: {}",
            if self.passed() {
                "PASS (the cost does not grow with live leases)"
            } else {
                "FAIL (the cost grows with live leases: does `expired` use an expiry index?)"
            }
        )
    }
}

/// Measures one checker round per size of [`CostCheck::live`] (each on a fresh store
/// from `factory`, with that many live members and [`CostCheck::expired`] expired
/// ones), and reports every judged cost that grew beyond the allowed ratio against the
/// first size. Panics when the store cannot be set up (a failed acquire, leases that
/// do not expire) or when the factory gives no store (see [`crate::skip`]).
pub async fn check_round_cost(factory: Factory, check: &CostCheck) -> CostReport {
    let mut samples = Vec::new();
    for &live in &check.live {
        let Some(store) = factory().await else {
            crate::skip::no_store("check_round_cost", "the factory returned None");
            return CostReport::default();
        };
        samples.push(round_cost(store, live, check).await);
    }
    let growth = judge(&samples, check);
    CostReport { samples, growth }
}

/// [`check_round_cost`] on a new runtime, for a test: prints the report (shown when
/// the test fails) and panics with it when a cost grew.
pub fn assert_round_cost(factory: Factory, check: &CostCheck) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let report = rt.block_on(check_round_cost(factory, check));
    println!("{report}");
    assert!(report.passed(), "{report}");
}

fn judge(samples: &[CostSample], check: &CostCheck) -> Vec<Growth> {
    let mut out = Vec::new();
    let Some(base) = samples.first() else {
        return out;
    };
    for s in &samples[1..] {
        let max_ratio = check.limit(base.live, s.live);
        let mut compare = |measure, baseline: f64, cost: f64, floor: f64| {
            if cost > baseline.max(floor) * max_ratio {
                out.push(Growth {
                    measure,
                    baseline_live: base.live,
                    baseline,
                    live: s.live,
                    cost,
                    max_ratio,
                });
            }
        };
        compare(
            Measure::RoundTrips,
            base.round_trips as f64,
            s.round_trips as f64,
            1.0,
        );
        if let (Some(b), Some(w)) = (base.work, s.work) {
            compare(Measure::Work, b as f64, w as f64, 1.0);
        }
        if check.judge_time {
            // A floor of 50 µs: below it, a round's time is the timer's noise.
            compare(
                Measure::Time,
                base.time.as_secs_f64(),
                s.time.as_secs_f64(),
                50e-6,
            );
        }
    }
    out
}

async fn round_cost(store: Arc<dyn Store>, live: usize, check: &CostCheck) -> CostSample {
    let caps = store.capabilities();
    let long = ttl_of(Duration::from_secs(3600).min(caps.max_ttl));
    let short = ttl_of(caps.min_ttl.max(Duration::from_millis(50)));
    let members = populate(&store, "live", live, long).await;
    assert_eq!(members.len(), live, "could not acquire {live} live leases");
    let wrapped = Arc::new(Wrapped::new(store.clone()));
    let checker = Checker::new(
        wrapped.clone(),
        CheckerConfig::default().batch(check.expired.clamp(1, caps.max_batch.max(1))),
    );
    let (mut trips, mut work, mut times) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..check.rounds.max(1) {
        let dying = populate(&store, &format!("dying{round}-"), check.expired, short).await;
        assert_eq!(dying.len(), check.expired, "could not acquire dying leases");
        wait_listed(&store, check.expired, short).await;
        let calls = wrapped.calls();
        let before = check.work.as_ref().map(|w| w());
        let start = Instant::now();
        let report = checker
            .round()
            .await
            .unwrap_or_else(|e| panic!("checker round: {e}"));
        times.push(start.elapsed().as_secs_f64());
        trips.push((wrapped.calls() - calls) as f64);
        if let (Some(meter), Some(before)) = (&check.work, before) {
            work.push(meter().saturating_sub(before) as f64);
        }
        assert_eq!(
            report.deaths.len(),
            check.expired,
            "a checker round over {live} live members reaped {} of {} expired ones",
            report.deaths.len(),
            check.expired
        );
    }
    CostSample {
        live,
        expired: check.expired,
        round_trips: median(&mut trips) as u64,
        work: check.work.as_ref().map(|_| median(&mut work) as u64),
        time: Duration::from_secs_f64(median(&mut times)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(live: usize, round_trips: u64, work: Option<u64>, micros: u64) -> CostSample {
        CostSample {
            live,
            expired: 10,
            round_trips,
            work,
            time: Duration::from_micros(micros),
        }
    }

    #[test]
    fn flat_costs_pass_and_growing_ones_fail() {
        let check = CostCheck::deterministic(vec![1_000, 100_000], None);
        assert_eq!(check.limit(1_000, 100_000), 10.0);
        let flat = [
            sample(1_000, 23, Some(40), 100),
            sample(100_000, 23, Some(41), 5_000),
        ];
        assert!(judge(&flat, &check).is_empty(), "time is not judged here");
        let scanning = [
            sample(1_000, 23, Some(2_000), 100),
            sample(100_000, 23, Some(200_000), 100),
        ];
        let growth = judge(&scanning, &check);
        assert_eq!(growth.len(), 1);
        assert_eq!(growth[0].measure, Measure::Work);
        assert_eq!(growth[0].live, 100_000);
        let timed = CostCheck {
            judge_time: true,
            ..check
        };
        let slow = judge(&flat, &timed);
        assert_eq!(
            slow.iter().map(|g| g.measure).collect::<Vec<_>>(),
            [Measure::Time]
        );
        let chatty = [
            sample(1_000, 23, None, 100),
            sample(100_000, 2_003, None, 100),
        ];
        assert_eq!(judge(&chatty, &timed)[0].measure, Measure::RoundTrips);
    }
}
