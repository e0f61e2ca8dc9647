"""The replication-mode registry and the none/passive policies (no Spark needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from arfl.configs.load import parse_spec
from arfl.errors import DeployError
from arfl.registry import MODES, ModeInfo
from arfl.replica.modes.base import (
    ReplicaContext,
    ReplicationMode,
    get_mode,
    known_modes,
)


def _ctx(tmp_path: Path) -> ReplicaContext:
    return ReplicaContext(
        replica=1, bootstrap="127.0.0.1:9", output_topic="out.r1", checkpoint_dir=tmp_path / "ckpt"
    )


def _spec(**repl: object) -> object:
    return parse_spec(
        {
            "name": "m",
            "source": {"topic": "in"},
            "sink": {"topic": "out"},
            "replication": {"mode": "passive", **repl},
        }
    )


def test_builtin_modes_are_registered() -> None:
    assert {"none", "passive"} <= set(known_modes())
    assert isinstance(get_mode("none"), ReplicationMode)


def test_unknown_mode_lists_the_known_ones() -> None:
    known = r"\(known: .*none, passive"
    with pytest.raises(DeployError, match=r"unknown replication mode 'activ' " + known):
        get_mode("activ")


def test_registering_a_second_class_under_a_taken_name_fails() -> None:
    class Other:
        name = "none"

        def source(self, spark, spec, ctx):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def checkpoint(self, ctx):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def sink_options(self, ctx):  # type: ignore[no-untyped-def]
            return {}

        def trigger(self, spec):  # type: ignore[no-untyped-def]
            return {}

    with pytest.raises(ValueError, match="registered twice"):
        MODES.register("none", ModeInfo("other"))(Other)
    assert type(get_mode("none")).__name__ == "NoReplication"


def test_every_mode_supplies_its_own_boundary_policy() -> None:
    from arfl.replica.modes.leader import LeaderPolicy
    from arfl.replica.modes.leaderless import LeaderlessPolicy
    from arfl.replica.source.policy import PlainPolicy

    expected = {
        "none": PlainPolicy,
        "passive": PlainPolicy,
        "active": PlainPolicy,
        "active-leader": LeaderPolicy,
        "active-leaderless": LeaderlessPolicy,
    }
    assert set(known_modes()) == set(expected)
    for name, cls in expected.items():
        annotation = type(get_mode(name)).boundary_policy.__annotations__["return"]
        assert annotation in (cls.__name__, "BoundaryPolicy"), name


def test_none_uses_a_temporary_checkpoint_and_passive_the_runner_one(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    tmp = get_mode("none").checkpoint(ctx)
    try:
        assert not tmp.durable
        assert tmp.location.is_dir() and tmp_path not in tmp.location.parents
    finally:
        shutil.rmtree(tmp.location)
    durable = get_mode("passive").checkpoint(ctx)
    assert durable.durable and durable.location == tmp_path / "ckpt"


def test_sink_and_triggers(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    opts = get_mode("passive").sink_options(ctx, _spec())  # type: ignore[arg-type]
    assert opts["topic"] == "out.r1" and opts["kafka.bootstrap.servers"] == "127.0.0.1:9"
    assert opts["kafka.linger.ms"] == "0"
    # real-time mode sends records as they come: 5 ms of batching (docs/benchmarks.md)
    rtm = get_mode("passive").sink_options(ctx, _spec(trigger="realtime"))  # type: ignore[arg-type]
    assert rtm["kafka.linger.ms"] == "5"
    assert get_mode("passive").trigger(_spec()) == {"processingTime": "0 milliseconds"}  # type: ignore[arg-type]
    assert get_mode("none").trigger(_spec(trigger_interval="250ms")) == {  # type: ignore[arg-type]
        "processingTime": "250 milliseconds"
    }
    assert get_mode("passive").trigger(_spec(trigger="realtime")) == {  # type: ignore[arg-type]
        "realTime": "5000 milliseconds"
    }


def test_sink_options_of_the_spec_override_the_producer_defaults(tmp_path: Path) -> None:
    spec = parse_spec(
        {
            "name": "m",
            "source": {"topic": "in"},
            "sink": {"topic": "out", "options": {"kafka.linger.ms": 2, "kafka.acks": "1"}},
            "replication": {"mode": "passive"},
        }
    )
    opts = get_mode("passive").sink_options(_ctx(tmp_path), spec)
    assert opts["kafka.linger.ms"] == "2" and opts["kafka.acks"] == "1"
    assert opts["topic"] == "out.r1"
    rtm = spec.model_copy(
        update={"replication": spec.replication.model_copy(update={"trigger": "realtime"})}
    )
    assert get_mode("passive").sink_options(_ctx(tmp_path), rtm)["kafka.linger.ms"] == "2"
