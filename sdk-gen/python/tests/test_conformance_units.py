"""Unit tests of the conformance worker's configuration, log lines and
composition, without a broker."""

import asyncio
import dataclasses
import json

import pytest

from converge_sdk.conformance import EventLog, composite_provider, leaf_provider
from converge_sdk.conformance.__main__ import ConfigError, settings_from_env, tls_from_env
from converge_sdk.worker import (
    UNKNOWN_REACTION_REASON,
    DEFAULT_HEARTBEAT_INTERVAL,
    DepEdge,
    Event,
    EventType,
    KindVersion,
    ReactionRequest,
    Resource,
    ResourceRef,
    RollupInput,
    Stage,
    Trigger,
    UnknownReactionError,
    ValueFlow,
)


def test_settings_from_the_environment():
    defaults = settings_from_env({})
    assert (defaults.max_parallel, defaults.drain_timeout) == (4, 10.0)
    assert defaults.heartbeat_interval == DEFAULT_HEARTBEAT_INTERVAL
    s = settings_from_env(
        {"CONFORMANCE_MAX_PARALLEL": "7", "CONFORMANCE_DRAIN_TIMEOUT_MS": "2500", "CONFORMANCE_HEARTBEAT_MS": "300"}
    )
    assert (s.max_parallel, s.drain_timeout, s.heartbeat_interval) == (7, 2.5, 0.3)
    for bad in ({"CONFORMANCE_MAX_PARALLEL": "0"}, {"CONFORMANCE_HEARTBEAT_MS": "soon"}):
        with pytest.raises(ConfigError):
            settings_from_env(bad)


def test_tls_from_the_environment(pki, tmp_path):
    assert tls_from_env({}) is None
    for name, source in (("ca.pem", "ca.pem"), ("w.crt", "a.crt"), ("w.key", "a.key")):
        (tmp_path / name).write_bytes((pki / source).read_bytes())
    ca = str(tmp_path / "ca.pem")
    server_only = tls_from_env({"CONVERGE_TLS_CA_FILE": ca})
    assert server_only is not None
    assert (server_only.ca_bundle, server_only.client_cert) == ((pki / "ca.pem").read_bytes(), None)
    mutual = tls_from_env(
        {
            "CONVERGE_TLS_CA_FILE": ca,
            "CONVERGE_TLS_CERT_FILE": str(tmp_path / "w.crt"),
            "CONVERGE_TLS_KEY_FILE": str(tmp_path / "w.key"),
        }
    )
    assert mutual is not None and mutual.reloads
    assert (mutual.client_cert, mutual.client_key) == ((pki / "a.crt").read_bytes(), (pki / "a.key").read_bytes())
    for bad in (
        {"CONVERGE_TLS_CA_FILE": ca, "CONVERGE_TLS_CERT_FILE": str(tmp_path / "w.crt")},
        {"CONVERGE_TLS_CERT_FILE": str(tmp_path / "w.crt"), "CONVERGE_TLS_KEY_FILE": str(tmp_path / "w.key")},
    ):
        with pytest.raises(ConfigError):
            tls_from_env(bad)


def _resource(kind, name, spec=None, owner=None, ready=False):
    return Resource(
        uid=name,
        kind=kind,
        kind_version=1,
        name=name,
        labels={},
        spec=spec or {},
        status=None,
        generation=3,
        observed_generation=0,
        ready=ready,
        healthy=ready,
        owner=owner,
    )


def _request(reaction, stage, resource, input=None):
    return ReactionRequest(
        reaction=reaction,
        stage=stage,
        trigger=Trigger.SPEC_CHANGE,
        kind=KindVersion("conf-composite", 1),
        resource=resource,
        generation=3,
        attempt=2,
        input=input,
    )


def test_compose_builds_children_and_deduplicated_edges(tmp_path):
    log = EventLog(str(tmp_path / "log"), "python")
    provider = composite_provider(log)
    spec = {
        "children": [
            {"name": "a", "spec": {"value": 1}},
            {
                "name": "b",
                "dependsOn": ["a"],
                "flows": [
                    {"from": "a", "source": "/value", "field": "/value"},
                    {"from": "c", "source": "/x", "field": "/y"},
                ],
            },
            {"name": "c"},
        ]
    }
    request = _request("compose", Stage.COMPOSE, _resource("conf-composite", "top", spec))
    outcome = asyncio.run(provider.handle(request))
    log.close()
    assert [(c.name, c.kind, c.spec) for c in outcome.children] == [
        ("a", "conf-leaf", {"value": 1}),
        ("b", "conf-leaf", {}),
        ("c", "conf-leaf", {}),
    ]
    leaf = lambda name: ResourceRef("conf-leaf", name)  # noqa: E731
    assert outcome.edges == [
        DepEdge(leaf("b"), leaf("a"), (ValueFlow("/value", "/value"),)),
        DepEdge(leaf("b"), leaf("c"), (ValueFlow("/y", "/x"),)),
    ]
    assert outcome.status == {"phase": "composed", "children": 3, "language": "python"}
    lines = [json.loads(l) for l in (tmp_path / "log").read_text().splitlines()]
    assert [l["event"] for l in lines] == ["start", "side-effect", "end"]
    assert all(l["plan"] is False for l in lines)
    assert lines[0] == {
        "event": "start",
        "kind": "conf-composite",
        "name": "top",
        "reaction": "compose",
        "generation": 3,
        "attempt": 2,
        "plan": False,
        "language": "python",
    }


def test_a_planned_compose_causes_no_side_effect(tmp_path):
    log = EventLog(str(tmp_path / "log"), "python")
    provider = composite_provider(log)
    request = _request("compose", Stage.COMPOSE, _resource("conf-composite", "top", {"children": [{"name": "a"}]}))
    outcome = asyncio.run(provider.handle(dataclasses.replace(request, plan=True)))
    log.close()
    assert [c.name for c in outcome.children] == ["a"]
    lines = [json.loads(l) for l in (tmp_path / "log").read_text().splitlines()]
    assert [(l["event"], l["plan"]) for l in lines] == [("start", True), ("end", True)]


def test_rollup_counts_direct_children_only():
    provider = composite_provider(EventLog(None, "python"))
    top = ResourceRef("conf-composite", "top")
    descendants = (
        _resource("conf-leaf", "a", owner=top, ready=True),
        _resource("conf-leaf", "b", owner=top, ready=False),
        _resource("conf-leaf", "grandchild", owner=ResourceRef("conf-leaf", "a"), ready=False),
    )
    request = _request("rollup", Stage.ROLLUP, _resource("conf-composite", "top"), RollupInput(descendants))
    outcome = asyncio.run(provider.handle(request))
    assert outcome.status == {"phase": "degraded", "children": 2, "ready": 1, "language": "python"}
    assert [(c.type, c.condition_status.value, c.reason) for c in outcome.conditions] == [
        ("Ready", "False", "ChildrenNotReady")
    ]
    assert outcome.healthy is False


def test_unknown_reactions_fail_transiently_with_the_sdk_default():
    log = EventLog(None, "python")
    for provider in (leaf_provider(log), composite_provider(log)):
        request = _request("nope", Stage.WORK, _resource(provider.kind.kind, "r"))
        with pytest.raises(UnknownReactionError) as excinfo:
            asyncio.run(provider.handle(request))
        assert not excinfo.value.terminal, provider.kind
        assert excinfo.value.reason == UNKNOWN_REACTION_REASON


def test_work_reports_the_events_and_liveness_the_spec_asks_for():
    provider = leaf_provider(EventLog(None, "python"))
    spec = {
        "livenessMs": 1500,
        "events": [{"reason": "Plain"}, {"reason": "Slow", "type": "Warning", "category": "probe", "message": "m"}],
    }
    outcome = asyncio.run(provider.handle(_request("work", Stage.WORK, _resource("conf-leaf", "r", spec))))
    assert [(c.type, c.reason, c.liveness) for c in outcome.conditions] == [
        ("Ready", "Conformed", None),
        ("Reachable", "Probed", 1.5),
    ]
    assert outcome.events == [Event("Plain"), Event("Slow", "m", EventType.WARNING, "probe")]
    plain = asyncio.run(provider.handle(_request("work", Stage.WORK, _resource("conf-leaf", "r"))))
    assert [c.type for c in plain.conditions] == ["Ready"] and plain.events == []
