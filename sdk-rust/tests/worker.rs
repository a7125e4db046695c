//! The worker runtime against a scripted in-process broker.

// Test helpers outside #[test] fns; a panic is the intended failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Broker, Shared, TestProvider, task};
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_proto::worker_v1::{ConditionStatus, ProviderConfigEntry, ProviderConfigUpdate, Stage};
use converge_sdk::worker::convert::{json_to_struct, struct_to_json};
use converge_sdk::worker::{KindVersion, ProviderConfig, WorkerBuilder, WorkerError, WorkerHandle};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running worker and the means to stop it.
struct Running {
    join: JoinHandle<Result<(), WorkerError>>,
    stop: Option<oneshot::Sender<()>>,
    handle: WorkerHandle,
}

impl Running {
    fn start(builder: WorkerBuilder) -> Self {
        let worker = builder.build().unwrap();
        let handle = worker.handle();
        let (stop, stopped) = oneshot::channel::<()>();
        let join = tokio::spawn(worker.run(async {
            let _ = stopped.await;
        }));
        Self {
            join,
            stop: Some(stop),
            handle,
        }
    }

    fn request_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    async fn stop(mut self) -> Result<(), WorkerError> {
        self.request_stop();
        tokio::time::timeout(common::WAIT, self.join)
            .await
            .expect("worker did not stop")
            .unwrap()
    }
}

fn provider(kind: &str, version: i32) -> (Arc<TestProvider>, Shared) {
    let p = TestProvider::new(kind, version);
    (Arc::clone(&p), Shared(p))
}

fn entry(kind: &str, version: i32, spec: serde_json::Value) -> ProviderConfigEntry {
    ProviderConfigEntry {
        kind: kind.into(),
        kind_version: version,
        spec: Some(json_to_struct(spec, "spec").unwrap()),
        data: Vec::new(),
    }
}

#[tokio::test]
async fn subscribe_comes_first_with_kinds_and_unready_interest() {
    let broker = Broker::start().await;
    broker.set_configs(vec![entry("noop", 1, json!({"a": 1}))]);
    let (noop, noop_p) = provider("noop", 1);
    let (other, other_p) = provider("other", 2);
    other.ready.store(false, Ordering::SeqCst);
    let worker = Running::start(broker.worker().max_parallel(4).provider(noop_p).provider(other_p));

    broker
        .wait_for("subscribe burst", |h| (h.stream(0).len() >= 2).then_some(()))
        .await;
    let history = common::History(broker.events());
    let first = history.stream(0);
    let Up::Subscribe(subscribe) = &first[0] else {
        panic!("first message is not Subscribe: {first:?}");
    };
    let kinds: Vec<_> = subscribe
        .kinds
        .iter()
        .map(|k| (k.kind.as_str(), k.kind_version))
        .collect();
    assert_eq!(kinds, [("noop", 1), ("other", 2)]);
    assert_eq!(subscribe.max_inflight, 4);
    assert!(subscribe.resumed.is_empty());
    assert!(subscribe.agent.starts_with("converge-sdk-rust/"), "{}", subscribe.agent);
    let Up::Interest(interest) = &first[1] else {
        panic!("second message is not Interest: {first:?}");
    };
    assert_eq!(
        (interest.kind.as_str(), interest.kind_version, interest.ready),
        ("other", 2, false)
    );

    // Configs were primed before the stream opened, then re-pulled after.
    let opened_at = history
        .0
        .iter()
        .position(|e| matches!(e, common::Event::Opened(0)))
        .unwrap();
    let first_pull = history
        .0
        .iter()
        .position(|e| matches!(e, common::Event::ConfigRequested(_)))
        .unwrap();
    assert!(first_pull < opened_at);
    broker
        .wait_for("config re-pull", |h| (h.config_requests() >= 2).then_some(()))
        .await;
    assert_eq!(
        noop.configs.lock().unwrap()[0],
        Some(ProviderConfig {
            spec: Some(json!({"a": 1})),
            data: Vec::new()
        })
    );
    assert_eq!(other.configs.lock().unwrap()[0], None);

    worker.stop().await.unwrap();
}

#[tokio::test]
async fn completion_echoes_the_fence_and_the_outcome() {
    let broker = Broker::start().await;
    let (noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().provider(noop_p));
    broker.stream_opened(0).await;

    let mut t = task("L1", "noop", 1, json!({"count": 5, "ratio": 0.5}));
    t.claim_epoch = 7;
    t.generation = 3;
    t.manifest_version = 99;
    broker.send_task(0, t).await;
    let done = broker.completion("L1").await;
    assert_eq!(done.lease_token, "L1");
    assert_eq!(done.claim_epoch, 7);
    assert_eq!(done.generation, 3);
    assert_eq!(done.manifest_version, 99);
    assert_eq!(done.stage, Stage::Work as i32);
    assert!(done.error.is_none(), "{:?}", done.error);
    assert_eq!(
        struct_to_json(done.status.unwrap()),
        json!({"handled": "res-L1", "generation": 3})
    );
    // Integral numbers reach the handler as integers.
    let spec = noop.requests.lock().unwrap()[0].resource.spec.clone();
    assert!(spec["count"].is_i64(), "{spec}");
    assert_eq!(spec["ratio"], json!(0.5));

    let mut t = task("L2", "noop", 1, json!({"mode": "rich"}));
    t.claim_epoch = 8;
    broker.send_task(0, t).await;
    let done = broker.completion("L2").await;
    assert_eq!(done.claim_epoch, 8);
    assert_eq!(done.healthy, Some(false));
    assert_eq!(done.requeue_after.unwrap().seconds, 2);
    assert_eq!(done.conditions.len(), 1);
    assert_eq!(done.conditions[0].r#type, "Ready");
    assert_eq!(done.conditions[0].status, ConditionStatus::True as i32);
    assert_eq!(done.conditions[0].reason, "Done");
    assert_eq!(struct_to_json(done.operation_output.unwrap()), json!({"out": 1}));
    assert!(done.compose_result.is_none());

    assert_eq!(worker.handle.stats().completed, 2);
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn max_parallel_is_never_exceeded() {
    let broker = Broker::start().await;
    let (noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().max_parallel(2).provider(noop_p));
    broker.stream_opened(0).await;

    // The scripted broker deliberately oversends: the worker must hold the line.
    for i in 0..5 {
        broker
            .send_task(0, task(&format!("P{i}"), "noop", 1, json!({"mode": "block"})))
            .await;
    }
    noop.wait_until("two handlers running", |p| p.started().len() == 2)
        .await;
    for step in 0..5 {
        let started = noop.started();
        let name = started[step].clone();
        noop.release(&name);
        let lease = name.trim_start_matches("res-").to_owned();
        broker.completion(&lease).await;
        let expect = (step + 3).min(5);
        noop.wait_until("the next handler to start", |p| p.started().len() >= expect)
            .await;
        assert!(noop.max_running.load(Ordering::SeqCst) <= 2);
    }
    assert_eq!(noop.max_running.load(Ordering::SeqCst), 2);
    assert_eq!(worker.handle.stats().completed, 5);
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn a_panicking_handler_fails_transient_and_the_worker_goes_on() {
    let broker = Broker::start().await;
    let (_noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().max_parallel(1).provider(noop_p));
    broker.stream_opened(0).await;

    broker
        .send_task(0, task("BOOM", "noop", 1, json!({"mode": "panic"})))
        .await;
    let done = broker.completion("BOOM").await;
    let error = done.error.unwrap();
    assert!(!error.terminal);
    assert!(
        error.message.contains("panicked") && error.message.contains("scripted panic"),
        "{}",
        error.message
    );

    broker.send_task(0, task("AFTER", "noop", 1, json!({}))).await;
    let done = broker.completion("AFTER").await;
    assert!(done.error.is_none());
    let stats = worker.handle.stats();
    assert_eq!((stats.completed, stats.failed), (1, 1));
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn terminal_and_transient_errors_are_kept_apart() {
    let broker = Broker::start().await;
    let (_noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().provider(noop_p));
    broker.stream_opened(0).await;

    broker
        .send_task(0, task("T", "noop", 1, json!({"mode": "terminal"})))
        .await;
    broker
        .send_task(0, task("R", "noop", 1, json!({"mode": "transient"})))
        .await;
    broker
        .send_task(0, task("E", "noop", 1, json!({"mode": "io_error"})))
        .await;
    let t = broker.completion("T").await.error.unwrap();
    assert!(t.terminal);
    assert_eq!(t.message, "scripted terminal");
    assert_eq!(t.reason, "Scripted");
    let r = broker.completion("R").await.error.unwrap();
    assert!(!r.terminal);
    let e = broker.completion("E").await.error.unwrap();
    assert!(!e.terminal, "a plain error converted with ? is transient");
    assert!(e.message.contains("No such file"), "{}", e.message);
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn unknown_kind_fails_transient() {
    let broker = Broker::start().await;
    let (_noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().provider(noop_p));
    broker.stream_opened(0).await;

    broker.send_task(0, task("U", "noop", 2, json!({}))).await;
    let error = broker.completion("U").await.error.unwrap();
    assert!(!error.terminal);
    assert!(
        error.message.contains("no provider for kind noop:2"),
        "{}",
        error.message
    );
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn heartbeats_list_exactly_the_running_leases() {
    let broker = Broker::start().await;
    let (noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().provider(noop_p));
    broker.stream_opened(0).await;

    // An idle worker still attests, with an empty list.
    broker
        .wait_for("an empty heartbeat", |h| {
            h.heartbeats().iter().any(|(_, l)| l.is_empty()).then_some(())
        })
        .await;

    broker
        .send_task(0, task("H1", "noop", 1, json!({"mode": "block"})))
        .await;
    broker
        .send_task(0, task("H2", "noop", 1, json!({"mode": "block"})))
        .await;
    noop.wait_until("both running", |p| p.started().len() == 2).await;
    let both = vec!["H1".to_owned(), "H2".to_owned()];
    broker
        .wait_for("a heartbeat with both", |h| {
            h.heartbeats().iter().any(|(_, l)| *l == both).then_some(())
        })
        .await;

    noop.release("res-H1");
    broker.completion("H1").await;
    let done_at = broker
        .wait_for("H1 done", |h| {
            h.completes()
                .iter()
                .find(|(_, _, c)| c.lease_token == "H1")
                .map(|(i, _, _)| *i)
        })
        .await;
    broker
        .wait_for("a heartbeat with H2 only", |h| {
            h.heartbeats()
                .iter()
                .any(|(i, l)| *i > done_at && *l == ["H2".to_owned()])
                .then_some(())
        })
        .await;

    noop.release("res-H2");
    broker.completion("H2").await;
    let done_at = broker
        .wait_for("H2 done", |h| {
            h.completes()
                .iter()
                .find(|(_, _, c)| c.lease_token == "H2")
                .map(|(i, _, _)| *i)
        })
        .await;
    broker
        .wait_for("an empty heartbeat after", |h| {
            h.heartbeats()
                .iter()
                .any(|(i, l)| *i > done_at && l.is_empty())
                .then_some(())
        })
        .await;

    // No heartbeat ever attested a lease after its completion, nor an
    // unknown one.
    let history = common::History(broker.events());
    let completed_at = |lease: &str| {
        history
            .completes()
            .iter()
            .find(|(_, _, c)| c.lease_token == lease)
            .map(|(i, _, _)| *i)
            .unwrap()
    };
    for (i, leases) in history.heartbeats() {
        for lease in &leases {
            assert!(lease == "H1" || lease == "H2", "unknown lease {lease}");
            assert!(i < completed_at(lease), "{lease} attested after its completion");
        }
    }
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn a_task_past_its_deadline_fails_transient_and_frees_its_slot() {
    let broker = Broker::start().await;
    let (_noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().max_parallel(1).provider(noop_p));
    broker.stream_opened(0).await;

    let mut t = task("SLOW", "noop", 1, json!({"mode": "hang"}));
    t.task_deadline = Some(prost_types::Duration {
        seconds: 0,
        nanos: 200_000_000,
    });
    broker.send_task(0, t).await;
    let error = broker.completion("SLOW").await.error.unwrap();
    assert!(!error.terminal);
    assert_eq!(error.message, "deadline exceeded");

    broker.send_task(0, task("NEXT", "noop", 1, json!({}))).await;
    assert!(broker.completion("NEXT").await.error.is_none());
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn a_dropped_stream_resumes_leases_and_redelivers_buffered_results() {
    let broker = Broker::start().await;
    let (noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().provider(noop_p));
    broker.stream_opened(0).await;

    let mut a = task("A", "noop", 1, json!({"mode": "block"}));
    a.claim_epoch = 11;
    let mut b = task("B", "noop", 1, json!({"mode": "block"}));
    b.claim_epoch = 12;
    broker.send_task(0, a).await;
    broker.send_task(0, b).await;
    noop.wait_until("both running", |p| p.started().len() == 2).await;

    // The broker goes away and refuses to come back for a while.
    broker.reject_streams(true);
    broker.break_stream(0).await;
    broker
        .wait_for("a refused reconnect", |h| {
            h.0.iter().any(|e| matches!(e, common::Event::Rejected)).then_some(())
        })
        .await;

    // B finishes while disconnected: its result must be buffered.
    noop.release("res-B");
    let handle = worker.handle.clone();
    tokio::time::timeout(common::WAIT, async {
        while handle.stats().buffered != 1 {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("B's result was never buffered");

    broker.reject_streams(false);
    broker.stream_opened(1).await;
    broker
        .wait_for("B redelivered", |h| {
            h.completes()
                .iter()
                .any(|(_, s, c)| *s == 1 && c.lease_token == "B")
                .then_some(())
        })
        .await;
    let history = common::History(broker.events());
    let second = history.stream(1);
    let Up::Subscribe(subscribe) = &second[0] else {
        panic!("first message on the new stream is not Subscribe: {second:?}");
    };
    let resumed: Vec<_> = subscribe
        .resumed
        .iter()
        .map(|r| (r.lease_token.as_str(), r.claim_epoch))
        .collect();
    assert_eq!(resumed, [("A", 11), ("B", 12)]);
    // The redelivery is the first thing after the Subscribe burst.
    let Up::Complete(redelivered) = &second[1] else {
        panic!("redelivery is not first: {second:?}");
    };
    assert_eq!(redelivered.lease_token, "B");
    assert_eq!(redelivered.claim_epoch, 12);
    assert!(history.stream(0).iter().all(|m| !matches!(m, Up::Complete(_))));

    // A, still running across the drop, completes on the new stream.
    noop.release("res-A");
    broker
        .wait_for("A on the new stream", |h| {
            h.completes()
                .iter()
                .any(|(_, s, c)| *s == 1 && c.lease_token == "A")
                .then_some(())
        })
        .await;
    let stats = worker.handle.stats();
    assert!(stats.reconnects >= 1);
    assert_eq!(stats.sessions, 2);
    assert_eq!(stats.buffered_dropped, 0);
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn a_result_is_kept_until_acknowledged_and_sent_again_on_the_next_stream() {
    let broker = Broker::start().await;
    let (_noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().provider(noop_p));
    broker.stream_opened(0).await;

    // Sent, but the broker cannot write it (no acknowledgement).
    broker.withhold_acks(true);
    let mut a = task("A", "noop", 1, json!({}));
    a.claim_epoch = 7;
    broker.send_task(0, a).await;
    broker.completion("A").await;
    assert_eq!(worker.handle.stats().buffered, 1, "kept until acknowledged");
    // Its lease is attested meanwhile.
    broker
        .wait_for("A attested", |h| {
            h.heartbeats()
                .iter()
                .any(|(_, leases)| leases.iter().any(|l| l == "A"))
                .then_some(())
        })
        .await;

    // The stream goes: the next one resumes A and sends its result again.
    broker.withhold_acks(false);
    broker.break_stream(0).await;
    broker.stream_opened(1).await;
    broker
        .wait_for("A sent again", |h| {
            h.completes()
                .iter()
                .any(|(_, s, c)| *s == 1 && c.lease_token == "A" && c.claim_epoch == 7)
                .then_some(())
        })
        .await;
    let history = common::History(broker.events());
    let Up::Subscribe(subscribe) = &history.stream(1)[0] else {
        panic!("no Subscribe first");
    };
    assert_eq!(
        subscribe
            .resumed
            .iter()
            .map(|r| r.lease_token.as_str())
            .collect::<Vec<_>>(),
        ["A"]
    );

    // Acknowledged now: forgotten, and not sent on a third stream.
    let handle = worker.handle.clone();
    tokio::time::timeout(common::WAIT, async {
        while handle.stats().buffered != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the acknowledged result was never forgotten");
    broker.break_stream(1).await;
    broker.stream_opened(2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let history = common::History(broker.events());
    assert!(
        history.stream(2).iter().all(|m| !matches!(m, Up::Complete(_))),
        "an acknowledged result was sent again"
    );
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn a_full_result_buffer_discards_the_oldest() {
    let broker = Broker::start().await;
    let (noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().result_buffer_capacity(1).provider(noop_p));
    broker.stream_opened(0).await;
    broker
        .send_task(0, task("OLD", "noop", 1, json!({"mode": "block"})))
        .await;
    broker
        .send_task(0, task("NEW", "noop", 1, json!({"mode": "block"})))
        .await;
    noop.wait_until("both running", |p| p.started().len() == 2).await;

    broker.reject_streams(true);
    broker.break_stream(0).await;
    broker
        .wait_for("a refused reconnect", |h| {
            h.0.iter().any(|e| matches!(e, common::Event::Rejected)).then_some(())
        })
        .await;
    noop.release("res-OLD");
    noop.release("res-NEW");
    let handle = worker.handle.clone();
    tokio::time::timeout(common::WAIT, async {
        while handle.stats().buffered_dropped != 1 || handle.stats().running != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("overflow never happened");

    broker.reject_streams(false);
    broker.stream_opened(1).await;
    let done = broker.completion("NEW").await;
    assert!(done.error.is_none());
    let history = common::History(broker.events());
    assert!(history.completes().iter().all(|(_, _, c)| c.lease_token != "OLD"));
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn readiness_flips_send_interest_and_unready_tasks_fail_transient() {
    let broker = Broker::start().await;
    let (noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().provider(noop_p));
    broker.stream_opened(0).await;

    noop.ready.store(false, Ordering::SeqCst);
    broker
        .wait_for("Interest ready=false", |h| {
            h.interests()
                .iter()
                .any(|(_, k, v, r)| k == "noop" && *v == 1 && !*r)
                .then_some(())
        })
        .await;

    // A task racing the Interest fails transiently, never terminally.
    broker.send_task(0, task("RACE", "noop", 1, json!({}))).await;
    let error = broker.completion("RACE").await.error.unwrap();
    assert!(!error.terminal);
    assert!(error.message.contains("not ready"), "{}", error.message);

    noop.ready.store(true, Ordering::SeqCst);
    broker
        .wait_for("Interest ready=true", |h| {
            h.interests().iter().any(|(_, k, _, r)| k == "noop" && *r).then_some(())
        })
        .await;
    let interests = common::History(broker.events()).interests();
    assert_eq!(interests.len(), 2, "one Interest per edge: {interests:?}");
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn config_pushes_reach_on_config_and_merge_with_overrides() {
    let broker = Broker::start().await;
    broker.set_configs(vec![entry("noop", 1, json!({"a": 1, "nested": {"x": 1}}))]);
    let (noop, noop_p) = provider("noop", 1);
    let worker = Running::start(broker.worker().provider(noop_p));
    broker.stream_opened(0).await;
    noop.wait_until("primed config", |p| !p.configs.lock().unwrap().is_empty())
        .await;

    // The stored default changes, then the broker pushes it.
    let mut updated = entry("noop", 1, json!({"a": 2, "nested": {"x": 1}}));
    updated.data = b"bundle".to_vec();
    broker.set_configs(vec![updated]);
    broker
        .push_config(
            0,
            ProviderConfigUpdate {
                kind: "noop".into(),
                kind_version: 1,
                spec: Some(json_to_struct(json!({"a": 2, "nested": {"x": 1}}), "spec").unwrap()),
                data: b"bundle".to_vec(),
                deleted: false,
            },
        )
        .await;
    noop.wait_until("pushed config", |p| {
        p.configs.lock().unwrap().last().cloned().flatten().and_then(|c| c.spec)
            == Some(json!({"a": 2, "nested": {"x": 1}}))
    })
    .await;

    let mut t = task("CFG", "noop", 1, json!({}));
    t.provider_config = Some(json_to_struct(json!({"nested": {"y": 2}}), "override").unwrap());
    broker.send_task(0, t).await;
    broker.completion("CFG").await;
    let request = noop.requests.lock().unwrap()[0].clone();
    assert_eq!(
        request.effective_config(),
        Some(json!({"a": 2, "nested": {"x": 1, "y": 2}}))
    );
    assert_eq!(request.effective_bundle(), b"bundle");
    assert_eq!(request.kind, KindVersion::new("noop", 1));

    broker.set_configs(Vec::new());
    broker
        .push_config(
            0,
            ProviderConfigUpdate {
                kind: "noop".into(),
                kind_version: 1,
                spec: None,
                data: Vec::new(),
                deleted: true,
            },
        )
        .await;
    noop.wait_until("deleted config", |p| p.configs.lock().unwrap().last() == Some(&None))
        .await;
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_drains_in_flight_work_and_refuses_new_tasks() {
    let broker = Broker::start().await;
    let (noop, noop_p) = provider("noop", 1);
    let mut worker = Running::start(broker.worker().provider(noop_p));
    broker.stream_opened(0).await;
    broker
        .send_task(0, task("G", "noop", 1, json!({"mode": "block"})))
        .await;
    noop.wait_until("G running", |p| p.started().len() == 1).await;

    worker.request_stop();
    broker
        .wait_for("drain Interest", |h| {
            h.interests().iter().any(|(_, _, _, r)| !*r).then_some(())
        })
        .await;
    assert!(
        !worker.join.is_finished(),
        "returned before the in-flight handler finished"
    );

    broker.send_task(0, task("LATE", "noop", 1, json!({}))).await;
    let error = broker.completion("LATE").await.error.unwrap();
    assert!(!error.terminal);
    assert!(error.message.contains("shutting down"), "{}", error.message);

    noop.release("res-G");
    let done = broker.completion("G").await;
    assert!(done.error.is_none());
    worker.stop().await.unwrap();
    assert!(common::History(broker.events()).has_closed(0));
    assert_eq!(noop.started(), ["res-G"]);
}

#[tokio::test]
async fn a_drain_timeout_reports_the_abandoned_work() {
    let broker = Broker::start().await;
    let (noop, noop_p) = provider("noop", 1);
    let worker = Running::start(
        broker
            .worker()
            .drain_timeout(Duration::from_millis(200))
            .provider(noop_p),
    );
    broker.stream_opened(0).await;
    broker
        .send_task(0, task("STUCK", "noop", 1, json!({"mode": "hang"})))
        .await;
    noop.wait_until("STUCK running", |p| p.started().len() == 1).await;
    match worker.stop().await {
        Err(WorkerError::DrainIncomplete { running, undelivered }) => assert_eq!((running, undelivered), (1, 0)),
        other => panic!("expected DrainIncomplete, got {other:?}"),
    }
}

#[tokio::test]
async fn builder_rejects_bad_settings() {
    let (_p, p) = provider("noop", 1);
    assert!(matches!(
        converge_sdk::worker::Worker::builder().provider(p).build(),
        Err(WorkerError::NoEndpoint)
    ));
    assert!(matches!(
        converge_sdk::worker::Worker::builder().endpoint("http://x").build(),
        Err(WorkerError::NoProviders)
    ));
    let (_a, a) = provider("noop", 1);
    let (_b, b) = provider("noop", 1);
    assert!(matches!(
        converge_sdk::worker::Worker::builder()
            .endpoint("http://x")
            .provider(a)
            .provider(b)
            .build(),
        Err(WorkerError::DuplicateProvider(_))
    ));
    let (_c, c) = provider("noop", 1);
    assert!(matches!(
        converge_sdk::worker::Worker::builder()
            .endpoint("http://x")
            .provider(c)
            .max_parallel(0)
            .build(),
        Err(WorkerError::InvalidSetting {
            name: "max_parallel",
            ..
        })
    ));
    let (_d, d) = provider("noop", 1);
    assert!(matches!(
        converge_sdk::worker::Worker::builder()
            .endpoint("not a uri\n")
            .provider(d)
            .build(),
        Err(WorkerError::InvalidEndpoint { .. })
    ));
}

#[tokio::test]
async fn the_periodic_refresh_picks_up_config_changes_without_a_push() {
    let broker = Broker::start().await;
    broker.set_configs(vec![entry("noop", 1, json!({"v": 1}))]);
    let (noop, noop_p) = provider("noop", 1);
    let worker = Running::start(
        broker
            .worker()
            .config_refresh_interval(Duration::from_millis(50))
            .provider(noop_p),
    );
    noop.wait_until("primed config", |p| !p.configs.lock().unwrap().is_empty())
        .await;
    broker.set_configs(vec![entry("noop", 1, json!({"v": 2}))]);
    noop.wait_until("refreshed config", |p| {
        p.configs.lock().unwrap().last().cloned().flatten().and_then(|c| c.spec) == Some(json!({"v": 2}))
    })
    .await;
    // Unchanged refreshes do not call on_config again.
    let calls = noop.configs.lock().unwrap().len();
    broker
        .wait_for("more refreshes", |h| (h.config_requests() >= 6).then_some(()))
        .await;
    assert_eq!(noop.configs.lock().unwrap().len(), calls);
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_without_a_reachable_broker_returns_promptly() {
    // A port nobody listens on.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let (_noop, noop_p) = provider("noop", 1);
    let mut worker = Running::start(
        converge_sdk::worker::Worker::builder()
            .endpoint(format!("http://{addr}"))
            .provider(noop_p),
    );
    worker.request_stop();
    let started = std::time::Instant::now();
    worker.stop().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
}
