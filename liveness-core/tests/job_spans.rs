//! The worker runs each job in a span of its own. A test binary of its own: tracing
//! caches, per call site, whether anybody listens, and tests of other binaries that
//! run jobs on other threads without a subscriber must not race this one's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use liveness_core::{Queue, Worker, WorkerConfig};

mod common;
use common::{all_done, memory, ttl};

/// A subscriber that records, for each span named `liveness.job`, its fields as text,
/// and the name of the span each event was logged in.
#[derive(Default)]
struct Spans {
    jobs: std::sync::Mutex<Vec<String>>,
    events_in_jobs: AtomicUsize,
    next: AtomicUsize,
    current: std::sync::Mutex<Vec<u64>>,
    job_ids: std::sync::Mutex<Vec<u64>>,
}

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

/// The subscriber a test installs; the test keeps the other handle to read it.
struct Recorder(Arc<Spans>);

impl std::ops::Deref for Recorder {
    type Target = Spans;
    fn deref(&self) -> &Spans {
        &self.0
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let id = self.next.fetch_add(1, Ordering::SeqCst) as u64 + 1;
        if span.metadata().name() == "liveness.job" {
            let mut fields = Fields(String::new());
            span.record(&mut fields);
            self.jobs.lock().unwrap().push(fields.0);
            self.job_ids.lock().unwrap().push(id);
        }
        tracing::span::Id::from_u64(id)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {
        let current = self.current.lock().unwrap();
        let jobs = self.job_ids.lock().unwrap();
        if current.iter().any(|id| jobs.contains(id)) {
            self.events_in_jobs.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, span: &tracing::span::Id) {
        self.current.lock().unwrap().push(span.into_u64());
    }
    fn exit(&self, span: &tracing::span::Id) {
        let mut current = self.current.lock().unwrap();
        if let Some(at) = current.iter().rposition(|id| *id == span.into_u64()) {
            current.remove(at);
        }
    }
}

/// Each job runs in a `liveness.job` span carrying its item, attempt and token, and
/// what the handler logs is inside it.
#[test]
fn each_job_runs_in_a_span_of_its_own() {
    let spans = Arc::new(Spans::default());
    tracing::subscriber::set_global_default(Recorder(spans.clone())).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let store = memory();
        let ids = Queue::new(store.clone())
            .enqueue_many(&[b"a", b"b"])
            .await
            .unwrap();
        let config = WorkerConfig::new("w", ttl(1000))
            .unwrap()
            .concurrency(2)
            .checker(false);
        let worker = Worker::start(store.clone(), config, |job| async move {
            tracing::info!(payload = ?job.payload(), "handling");
            Ok(())
        })
        .await
        .unwrap();
        all_done(&store, Duration::from_secs(5)).await;
        worker.shutdown(Duration::from_secs(1)).await.unwrap();
        let jobs = spans.jobs.lock().unwrap().clone();
        assert_eq!(jobs.len(), 2, "{jobs:?}");
        for (id, fields) in ids.iter().zip(&jobs) {
            assert!(fields.contains(&format!("item={id} ")), "{fields}");
            assert!(fields.contains("attempt=1 "), "{fields}");
            assert!(fields.contains("token="), "{fields}");
        }
    });
    assert!(spans.events_in_jobs.load(Ordering::SeqCst) >= 2);
}
