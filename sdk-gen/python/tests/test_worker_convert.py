"""Unit tests of task decoding and outcome encoding."""

import math

from google.protobuf import struct_pb2

from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb
from converge_sdk.worker import (
    ChildSpec,
    ComposeInput,
    Condition,
    ConditionStatus,
    DepEdge,
    Event,
    EventType,
    KindVersion,
    Outcome,
    ProviderConfig,
    ProviderConfigSpec,
    ResourceRef,
    RollupInput,
    Stage,
    TerminalError,
    TransientError,
    Trigger,
    ValueFlow,
)
from converge_sdk.worker.convert import (
    Fence,
    condition_from_proto,
    json_to_struct,
    provider_config,
    request_from_task,
    struct_to_json,
)


def _struct(value):
    s = struct_pb2.Struct()
    s.update(value)
    return s


def _fence(stage=pb.STAGE_WORK):
    return Fence(lease_token="l", claim_epoch=1, stage=stage, generation=2, manifest_version=3)


def test_struct_round_trip_restores_integers():
    original = {"count": 5, "ratio": 0.5, "big": -42, "list": [1, "a", None, True], "nested": {"x": 1}}
    back = struct_to_json(json_to_struct(original, "spec"))
    assert back == original
    assert isinstance(back["count"], int) and isinstance(back["ratio"], float)


def test_non_finite_numbers_decode_as_null():
    s = struct_pb2.Struct()
    s.fields["n"].number_value = math.nan
    assert struct_to_json(s) == {"n": None}


def test_failure_echoes_the_fence():
    complete = _fence().failure(TerminalError("bad spec", reason="InvalidSpec"))
    assert (complete.lease_token, complete.claim_epoch, complete.stage) == ("l", 1, pb.STAGE_WORK)
    assert (complete.generation, complete.manifest_version) == (2, 3)
    assert complete.error.message == "bad spec"
    assert complete.error.terminal and complete.error.reason == "InvalidSpec"
    assert not _fence().failure(TransientError("")).error.terminal
    assert _fence().failure(TransientError("")).error.message == "handler failed without a message"


def test_non_object_status_is_a_terminal_failure():
    complete = _fence().success(Outcome(status=5))  # type: ignore[arg-type]
    assert complete.error.terminal
    assert complete.error.reason == "InvalidOutcome"
    assert "status must be a JSON object" in complete.error.message
    assert complete.lease_token == "l" and complete.manifest_version == 3


def test_unencodable_values_are_terminal_failures():
    complete = _fence().success(Outcome(status={"when": object()}))
    assert complete.error.terminal and "status.when" in complete.error.message


def test_work_outcome_parts():
    outcome = Outcome(
        status={"ok": True},
        conditions=[Condition("Ready", True, reason="Done"), Condition("Cached", ConditionStatus.UNKNOWN)],
        healthy=False,
        requeue_after=1.5,
    )
    complete = _fence().success(outcome)
    assert not complete.HasField("error")
    assert struct_to_json(complete.status) == {"ok": True}
    assert [(c.type, c.status, c.reason) for c in complete.conditions] == [
        ("Ready", pb.CONDITION_STATUS_TRUE, "Done"),
        ("Cached", pb.CONDITION_STATUS_UNKNOWN, ""),
    ]
    assert complete.HasField("healthy") and complete.healthy is False
    assert (complete.requeue_after.seconds, complete.requeue_after.nanos) == (1, 500_000_000)
    # Not a compose task and no composition parts: no compose_result.
    assert not complete.HasField("compose_result")
    assert not complete.HasField("operation_output")


def test_requeue_after_takes_a_timedelta_and_refuses_negative_delays():
    from datetime import timedelta

    complete = _fence().success(Outcome(requeue_after=timedelta(milliseconds=250)))
    assert (complete.requeue_after.seconds, complete.requeue_after.nanos) == (0, 250_000_000)
    refused = _fence().success(Outcome(requeue_after=-1))
    assert refused.error.terminal and "requeue_after" in refused.error.message


def test_absent_parts_stay_absent():
    complete = _fence().success(Outcome(requeue_after=0))
    for name in ("status", "healthy", "requeue_after", "compose_result", "operation_output", "error"):
        assert not complete.HasField(name), name


def test_compose_always_sends_a_compose_result():
    assert _fence(pb.STAGE_COMPOSE).success(Outcome()).HasField("compose_result")
    outcome = Outcome(
        children=[ChildSpec("leaf", 1, "a", spec={"n": 1}, labels={"team": "x"}, provider_config="cfg")],
        edges=[DepEdge(ResourceRef("leaf", "a"), ResourceRef("leaf", "b"), (ValueFlow("/in", "/out"),))],
        configs=[ProviderConfigSpec("cfg", "leaf", 1, is_default=False, spec={"region": "eu"}, data=b"\x01")],
    )
    result = _fence(pb.STAGE_COMPOSE).success(outcome).compose_result
    child = result.desired[0]
    assert (child.kind, child.kind_version, child.name, child.provider_config) == ("leaf", 1, "a", "cfg")
    assert dict(child.labels) == {"team": "x"} and struct_to_json(child.spec) == {"n": 1}
    edge = result.edges[0]
    assert (edge.dependent.name, edge.dependency.name) == ("a", "b")
    assert [(f.dependent_field, f.source_field) for f in edge.value_flows] == [("/in", "/out")]
    config = result.configs[0]
    assert (config.name, config.data, struct_to_json(config.spec)) == ("cfg", b"\x01", {"region": "eu"})


def test_operate_output():
    complete = _fence(pb.STAGE_OPERATE).success(Outcome(operation_output={"answer": 42}))
    assert struct_to_json(complete.operation_output) == {"answer": 42}


def _task(**fields):
    task = pb.StageTask(
        stage=pb.STAGE_WORK,
        kind="leaf",
        kind_version=1,
        resource=pb.Resource(uid="u", kind="leaf", kind_version=1, name="r1", spec=_struct({"n": 1}), generation=4),
        generation=4,
        reaction="work",
        trigger=pb.TRIGGER_CONFIG_CHANGE,
        lease_token="l",
        claim_epoch=9,
        manifest_version=7,
        attempt=2,
    )
    for key, value in fields.items():
        getattr(task, key).CopyFrom(value) if hasattr(value, "DESCRIPTOR") else setattr(task, key, value)
    return task


def test_request_from_task_decodes_and_merges_configs():
    task = _task(provider_config=_struct({"nested": {"b": 2}, "x": 1}), provider_bundle=b"")
    default = ProviderConfig(spec={"nested": {"a": 1, "b": 1}}, data=b"bundle")
    request = request_from_task(task, default, deadline=None)
    assert request.kind == KindVersion("leaf", 1)
    assert request.stage is Stage.WORK and request.trigger is Trigger.CONFIG_CHANGE
    assert request.trigger.value == "config_change"
    assert (request.generation, request.attempt, request.reaction) == (4, 2, "work")
    assert request.resource.spec == {"n": 1} and request.resource.status is None
    assert request.effective_config() == {"nested": {"a": 1, "b": 2}, "x": 1}
    assert request.effective_bundle() == b"bundle"
    assert request.remaining() is None


def test_bundle_override_wins_and_no_config_is_none():
    request = request_from_task(_task(provider_bundle=b"mine"), None, deadline=None)
    assert request.effective_config() is None
    assert request.effective_bundle() == b"mine"


def test_stage_inputs_decode():
    compose = _task(stage=pb.STAGE_COMPOSE)
    compose.compose_input.desired.add(kind="leaf", kind_version=1, name="c")
    request = request_from_task(compose, None, None)
    assert isinstance(request.input, ComposeInput)
    assert request.input.desired[0] == ChildSpec("leaf", 1, "c")

    rollup = _task(stage=pb.STAGE_ROLLUP)
    rollup.rollup_input.descendants.add(kind="leaf", name="c", ready=True, owner=pb.ResourceRef(kind="top", name="t"))
    request = request_from_task(rollup, None, None)
    assert isinstance(request.input, RollupInput)
    assert request.input.descendants[0].owner == ResourceRef("top", "t")
    assert request.input.descendants[0].ready


def test_undecodable_tasks_raise():
    import pytest

    from converge_sdk.worker.convert import DecodeError

    with pytest.raises(DecodeError, match="stage"):
        request_from_task(_task(stage=pb.STAGE_UNSPECIFIED), None, None)
    task = _task()
    task.ClearField("resource")
    with pytest.raises(DecodeError, match="resource"):
        request_from_task(task, None, None)


def test_provider_config_absent_when_both_parts_are():
    assert provider_config(None, b"") is None
    assert provider_config(None, b"x") == ProviderConfig(spec=None, data=b"x")
    assert provider_config(_struct({"a": 1}), b"") == ProviderConfig(spec={"a": 1})


def test_success_carries_events_and_liveness():
    from datetime import timedelta

    outcome = Outcome(
        conditions=[
            Condition("Reachable", True, liveness=2.5),
            Condition("Synced", ConditionStatus.FALSE, liveness=timedelta(minutes=2)),
            Condition("Ready", True, liveness=0),
        ],
        events=[Event.warning("ProbeSlow", "slow", category="probe", detail={"ms": 900})],
    ).add_event(Event("Probed"))
    complete = _fence().success(outcome)
    assert not complete.HasField("error")
    reachable, synced, ready = complete.conditions
    assert (reachable.liveness.seconds, reachable.liveness.nanos) == (2, 500_000_000)
    assert (synced.liveness.seconds, synced.liveness.nanos) == (120, 0)
    assert not ready.HasField("liveness"), "zero liveness = an ordinary condition"
    assert condition_from_proto(reachable).liveness == 2.5
    assert condition_from_proto(ready).liveness is None
    slow, probed = complete.events
    assert (slow.category, slow.type, slow.reason, slow.message) == ("probe", pb.EVENT_TYPE_WARNING, "ProbeSlow", "slow")
    assert struct_to_json(slow.detail) == {"ms": 900}
    assert (probed.category, probed.type, probed.reason, probed.message) == ("", pb.EVENT_TYPE_NORMAL, "Probed", "")
    assert not probed.HasField("detail")


def test_invalid_liveness_is_a_terminal_failure():
    complete = _fence().success(Outcome(conditions=[Condition("Ready", True), Condition("Up", True, liveness=-1)]))
    assert complete.error.terminal and complete.error.reason == "InvalidOutcome"
    assert "conditions[1].liveness" in complete.error.message
    assert not complete.conditions


def test_event_constructors_and_defaults():
    assert Event("Done") == Event.normal("Done") == Event("Done", "", EventType.NORMAL, "", None)
    warning = Event.warning("Quota", "nearly out", category="billing", detail={"left": 1})
    assert (warning.type, warning.category, warning.detail) == (EventType.WARNING, "billing", {"left": 1})


def test_failure_carries_its_events():
    error = TransientError("down", reason="Unreachable", events=[Event.normal("Tried", "once", detail={"n": 1})])
    assert error.add_event(Event.warning("GaveUp")) is error
    complete = _fence().failure(error)
    assert complete.error.message == "down" and complete.error.reason == "Unreachable"
    assert not complete.error.terminal
    assert [(e.reason, e.type) for e in complete.events] == [
        ("Tried", pb.EVENT_TYPE_NORMAL),
        ("GaveUp", pb.EVENT_TYPE_WARNING),
    ]
    assert struct_to_json(complete.events[0].detail) == {"n": 1}
    assert not _fence().failure(TerminalError("bad")).events


def test_non_object_event_detail_is_refused_on_success_and_dropped_on_failure():
    bad = Event.normal("Tried", "once", detail=[1])  # type: ignore[arg-type]
    refused = _fence().success(Outcome(status={"ok": True}, events=[Event("Fine"), bad]))
    assert refused.error.terminal and refused.error.reason == "InvalidOutcome"
    assert "events[1].detail must be a JSON object" in refused.error.message
    assert not refused.events and not refused.HasField("status"), "an invalid outcome sends none of its parts"

    unencodable = Event.warning("Odd", detail={"when": object()})
    failed = _fence().failure(TransientError("down", events=[bad, unencodable, Event("Kept", detail={"k": 1})]))
    assert [e.reason for e in failed.events] == ["Tried", "Odd", "Kept"]
    assert not failed.events[0].HasField("detail") and not failed.events[1].HasField("detail")
    assert failed.events[0].message == "once" and failed.events[1].type == pb.EVENT_TYPE_WARNING
    assert struct_to_json(failed.events[2].detail) == {"k": 1}


def test_failure_leaves_out_events_that_cannot_be_encoded_at_all():
    broken = Event(reason=5)  # type: ignore[arg-type]
    mistyped = Event("Typed", type="warning")  # type: ignore[arg-type]
    failed = _fence().failure(TransientError("down", events=[broken, mistyped, Event("Kept")]))
    assert [e.reason for e in failed.events] == ["Kept"]
    refused = _fence().success(Outcome(events=[mistyped]))
    assert refused.error.terminal and "events[0].type" in refused.error.message
