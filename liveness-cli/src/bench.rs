//! `liveness bench`: the bench kit (`liveness-bench`) against the given store, so a user
//! measures their own deployment. Each measurement runs on a fresh namespace
//! `bench_XXXXXXXX` of the same store (left behind: drop it when done).

use liveness::Page;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use liveness::{Key, Space, Store};
use liveness_bench::{self as bench, Options};
use serde::Serialize;
use tokio::time::Instant;

use crate::output::{duration, print, table};
use crate::{Ctx, Failure};

/// One figure, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Figure {
    /// `renewals`, `checker_round`, `members_first_page` or `detection`.
    what: &'static str,
    /// What it was measured over (`members=64`, `members=10000 expired=100`).
    setting: String,
    /// `per_second` for renewals, `ms` for a round and a page, `median_ms` for
    /// detection.
    value: f64,
    unit: &'static str,
    /// Store calls of a checker round; one round trip (an `inspect`) in ms beside a
    /// page; detection's p99 in ms.
    extra: Option<f64>,
}

/// `url` with its `ns` parameter set to `ns` (added, or replacing the one given).
pub(crate) fn with_namespace(url: &str, ns: &str) -> Result<String, Failure> {
    let mut parsed =
        url::Url::parse(url).map_err(|e| Failure::Input(format!("invalid url {url:?}: {e}")))?;
    let rest: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(k, _)| k != "ns")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    parsed
        .query_pairs_mut()
        .clear()
        .extend_pairs(rest)
        .append_pair("ns", ns);
    Ok(parsed.into())
}

async fn fresh(ctx: &Ctx) -> Result<Arc<dyn Store>, Failure> {
    let url = with_namespace(&ctx.url, &format!("bench_{:08x}", fastrand::u32(..)))?;
    crate::within(ctx.timeout, async { Ok(liveness::connect(&url).await?) }).await
}

/// The page `members_first_page` asks for.
const PAGE: usize = 100;

/// The median time of `leases` asking for the first [`PAGE`] of the members space,
/// and of one `inspect` of a member (one round trip reading one record), in ms, over
/// 7 calls each.
async fn first_page(store: &dyn Store) -> Result<(f64, f64), Failure> {
    let (mut page, mut trip) = (Vec::new(), Vec::new());
    // The bench kit's first live member.
    let one = Key::member("live0")?;
    for _ in 0..7 {
        let start = Instant::now();
        store.leases(&Space::members(), Page::first(PAGE)).await?;
        page.push(start.elapsed().as_secs_f64() * 1e3);
        let start = Instant::now();
        store.inspect(&one).await?;
        trip.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok((bench::median(&mut page), bench::median(&mut trip)))
}

pub(crate) async fn run(ctx: &Ctx, o: Options) -> Result<(), Failure> {
    let steps = o.concurrency.len() + 3 * o.members.len() + usize::from(o.deaths > 0);
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}")
            .map_err(|e| Failure::Other(e.to_string()))?,
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let mut figures = Vec::new();
    for &c in &o.concurrency {
        bar.set_message(format!("renewals, {c} members"));
        let r = bench::renewals(fresh(ctx).await?, c, o.seconds).await;
        figures.push(Figure {
            what: "renewals",
            setting: format!("members={c}"),
            value: r.per_second.round(),
            unit: "per_second",
            extra: None,
        });
        bar.inc(1);
    }
    for &m in &o.members {
        for pct in [0, 1] {
            let expired = m * pct / 100;
            bar.set_message(format!("checker round, {m} members, {expired} expired"));
            let store = fresh(ctx).await?;
            let r = bench::checker_round(store.clone(), m, expired).await;
            figures.push(Figure {
                what: "checker_round",
                setting: format!("members={m} expired={expired}"),
                value: r.time.as_secs_f64() * 1e3,
                unit: "ms",
                extra: Some(r.round_trips as f64),
            });
            bar.inc(1);
            if pct == 0 {
                bar.set_message(format!("members: first page of {m}"));
                let (page, trip) = first_page(&*store).await?;
                figures.push(Figure {
                    what: "members_first_page",
                    setting: format!("members={m} page={PAGE}"),
                    value: page,
                    unit: "ms",
                    extra: Some(trip),
                });
                bar.inc(1);
            }
        }
    }
    if o.deaths > 0 {
        bar.set_message(format!("detection latency over {} deaths", o.deaths));
        let d = bench::detection(fresh(ctx).await?, o.deaths).await;
        figures.push(Figure {
            what: "detection",
            setting: format!("deaths={} ttl={}", d.latencies.len(), duration(d.ttl)),
            value: d.percentile(0.5).as_secs_f64() * 1e3,
            unit: "median_ms",
            extra: Some(d.percentile(0.99).as_secs_f64() * 1e3),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    print(ctx.json, &figures, || {
        let header = format!("liveness bench: {} ({})", ctx.store.backend(), ctx.url);
        let rows = figures.iter().map(|f| {
            let (value, extra) = match f.what {
                "renewals" => (format!("{:.0}/s", f.value), String::new()),
                "checker_round" => (
                    format!("{:.3} ms", f.value),
                    format!("{} round trips", f.extra.unwrap_or(0.0)),
                ),
                "members_first_page" => (
                    format!("{:.3} ms", f.value),
                    format!("one inspect {:.3} ms", f.extra.unwrap_or(0.0)),
                ),
                _ => (
                    format!("median {:.0} ms", f.value),
                    format!("p99 {:.0} ms", f.extra.unwrap_or(0.0)),
                ),
            };
            vec![f.what.to_string(), f.setting.clone(), value, extra]
        });
        format!(
            "{header}\n{}",
            table(&["measure", "setting", "figure", ""], rows)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_is_set_or_replaced_and_other_parameters_kept() {
        assert_eq!(
            with_namespace("sqlite:///tmp/x.db?ns=app&busy_ms=5", "bench_1").unwrap(),
            "sqlite:///tmp/x.db?busy_ms=5&ns=bench_1"
        );
        assert_eq!(
            with_namespace("redis://127.0.0.1:6379", "b").unwrap(),
            "redis://127.0.0.1:6379?ns=b"
        );
        assert!(matches!(
            with_namespace("nope", "b"),
            Err(Failure::Input(_))
        ));
    }
}
