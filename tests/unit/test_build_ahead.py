"""A standby builds each replica's pipeline while it waits; a take-over uses the one built for
its replica only when its source would be the same (``replica/standby.Ahead``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from arfl.configs.load import parse_spec
from arfl.configs.spec import BUILD_AHEAD_KEY, Spec
from arfl.replica.app import DriverConfig, replica_context
from arfl.replica.modes.base import (
    PEER_PROGRESS,
    STAGGER_REF,
    STARTING_OFFSETS,
    ReplicaContext,
    get_mode,
    kafka_options,
)
from arfl.replica.standby import (
    KAFKA_SOURCE_LOG_HEADER,
    Ahead,
    build_ahead,
    seed_initial_offsets,
)

START = json.dumps({"in": {"0": 0, "1": 0}})


def _spec(mode: str = "active", **conf: Any) -> Spec:
    raw: dict[str, Any] = {
        "name": "ahead",
        "source": {"topic": "in", "partitions": 2},
        "sink": {"topic": "out"},
        "replication": {"mode": mode, "replicas": 2 if mode.startswith("active") else 1},
        "spark": {"conf": conf},
    }
    if mode == "active":
        raw["replication"] |= {"trigger": "realtime", "standby": 1}
    if not mode.startswith("active-"):  # arfl's own source takes no Kafka reader options
        raw["source"]["options"] = {"kafka.fetch.min.bytes": "1"}
    return parse_spec(raw, "ahead.toml")


def _cfg(spec: Spec, replica: int, ckpt: str | None = None, **options: str) -> DriverConfig:
    return DriverConfig(
        spec=spec.model_dump(mode="json", by_alias=True),
        replica=replica,
        bootstrap="127.0.0.1:9",
        output_topic=f"out.r{replica}",
        checkpoint_dir=ckpt or f"/tmp/ck{replica}",
        progress_file="/tmp/p",
        app_id_file="/tmp/a",
        master=spec.spark.master,
        mode_options={STARTING_OFFSETS: START, **options},
    )


def _ctx(**options: str) -> ReplicaContext:
    return ReplicaContext(
        replica=0,
        bootstrap="127.0.0.1:9",
        output_topic="out.r0",
        checkpoint_dir=Path("/tmp/ck"),
        options=options,
    )


def test_kafka_options_are_the_readers_whole_configuration() -> None:
    spec = _spec()
    opts = kafka_options(spec, _ctx(**{"kafka.client.id": "x", STAGGER_REF: "/a"}), START)
    assert opts == {
        "kafka.bootstrap.servers": "127.0.0.1:9",
        "subscribe": "in",
        "startingOffsets": START,
        "failOnDataLoss": "false",
        "kafka.fetch.min.bytes": "1",  # the spec's source options
        "kafka.client.id": "x",  # kafka.* mode options pass through, the others do not
    }
    # micro-batch caps each batch; a rehearsal reads a topic of its own
    micro = kafka_options(_spec("passive"), _ctx(), "earliest", topic="t")
    assert micro["maxOffsetsPerTrigger"] and micro["subscribe"] == "t"


def test_a_source_key_says_when_two_replicas_read_the_same() -> None:
    spec, active = _spec(), get_mode("active")
    key = active.source_key(spec, replica_context(_cfg(spec, 0)))
    # another replica, other peers, another checkpoint: the same source
    other = _cfg(spec, 1, **{PEER_PROGRESS: "[]", STAGGER_REF: "/a"})
    assert active.source_key(spec, replace(replica_context(other), attempt=3)) == key
    # a resume at the output frontier starts from offsets of its own; a kafka.* option counts
    moved = _cfg(spec, 0, **{STARTING_OFFSETS: json.dumps({"in": {"0": 7, "1": 9}})})
    assert active.source_key(spec, replica_context(moved)) != key
    assert active.source_key(spec, replica_context(_cfg(spec, 0, **{"kafka.x": "1"}))) != key
    # arfl's own source (threads, clients) is built anew each time
    for mode in ("active-leader", "active-leaderless"):
        assert get_mode(mode).source_key(_spec(mode), replica_context(_cfg(spec, 0))) is None
    # none reads from "latest" after a restart
    none, n = get_mode("none"), _spec("none")
    first = none.source_key(n, replica_context(_cfg(n, 0)))
    assert none.source_key(n, replace(replica_context(_cfg(n, 0)), attempt=1)) != first


class _Mode:
    """The active mode with a source that records what it was asked for (no Spark)."""

    def __init__(self) -> None:
        self.active = get_mode("active")
        self.built: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.active, name)

    def source(self, spark: Any, spec: Spec, ctx: ReplicaContext) -> Any:
        del spark
        self.built.append(ctx.replica)
        return ("source", ctx.replica, self.active.source_key(spec, ctx))


def test_a_take_over_uses_the_pipeline_built_for_its_replica_only_from_the_same_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        "arfl.replica.standby.pipeline", lambda raw, spec, r: ("pipeline", r, raw[2])
    )
    spec, mode = _spec(), _Mode()
    standby = _cfg(spec, 0)  # a standby's index is its own; its options are the replicas'
    ahead = build_ahead(None, spec, mode, standby, _never())  # type: ignore[arg-type]
    assert ahead is not None and mode.built == [0, 1]
    # a take-over of replica 1 resuming from a checkpoint (the deploy's start offsets in its
    # options, ignored by Spark then): replica 1's pipeline
    took = _cfg(spec, 1, **{PEER_PROGRESS: "[]"})
    got = ahead.pipeline(took, mode, spec)  # type: ignore[arg-type]
    assert got is not None and got[:2] == ("pipeline", 1)
    # at the output frontier: offsets of its own, written where the Kafka source reads a new
    # query's first offsets; the pipeline built ahead serves it
    fresh = tmp_path / "replica-1.1"
    moved = json.dumps({"in": {"0": 5, "1": 7}})
    frontier = _cfg(spec, 1, str(fresh), **{STARTING_OFFSETS: moved})
    got = ahead.pipeline(frontier, mode, spec)  # type: ignore[arg-type]
    assert got is not None and got[:2] == ("pipeline", 1)
    written = (fresh / "sources" / "0" / "0").read_bytes()
    assert written.startswith(KAFKA_SOURCE_LOG_HEADER)
    assert json.loads(written[len(KAFKA_SOURCE_LOG_HEADER) :]) == json.loads(moved)
    # ... but not when its source differs in more than its offsets, names other partitions,
    # or its checkpoint is not a new query's
    other = _cfg(spec, 1, str(tmp_path / "o"), **{STARTING_OFFSETS: moved, "kafka.x": "1"})
    assert ahead.pipeline(other, mode, spec) is None  # type: ignore[arg-type]
    fewer = _cfg(spec, 1, str(tmp_path / "o"), **{STARTING_OFFSETS: '{"in": {"0": 5}}'})
    assert ahead.pipeline(fewer, mode, spec) is None  # type: ignore[arg-type]
    assert not (tmp_path / "o").exists()
    (tmp_path / "old" / "offsets").mkdir(parents=True)
    (tmp_path / "old" / "offsets" / "0").write_text("v1")
    old = _cfg(spec, 1, str(tmp_path / "old"), **{STARTING_OFFSETS: moved})
    assert ahead.pipeline(old, mode, spec) is None  # type: ignore[arg-type]
    assert not (tmp_path / "old" / "sources").exists()
    # built without start offsets: nothing to compare with
    bare = Ahead(spec=ahead.spec, pipelines=ahead.pipelines)
    assert (
        bare.pipeline(_cfg(spec, 1, str(tmp_path / "b"), **{STARTING_OFFSETS: moved}), mode, spec)
        is None
    )  # type: ignore[arg-type]
    # another spec, or a replica it did not build for (a mode whose source is not only its
    # options builds nothing)
    assert Ahead(spec={"x": 1}, pipelines=ahead.pipelines).pipeline(took, mode, spec) is None  # type: ignore[arg-type]
    assert ahead.pipeline(_cfg(spec, 2), mode, spec) is None  # type: ignore[arg-type]
    leader = _spec("active-leader")
    assert build_ahead(None, leader, get_mode("active-leader"), _cfg(leader, 0), _never()) is None


@pytest.mark.parametrize(
    ("offsets", "state", "seeded"),
    [
        ({"in": {"0": 5, "1": 0}}, None, True),
        # Spark resolves "earliest" (-2) and "latest" (-1) markers itself
        ({"in": {"0": -2, "1": 4}}, None, False),
        ({"in": {}}, None, False),
        ("earliest", None, False),
        # not a new query: Spark reads its own logs, and a seed would be ignored or wrong
        ({"in": {"0": 5, "1": 0}}, "offsets/0", False),
        ({"in": {"0": 5, "1": 0}}, "sources/0/0", False),
    ],
)
def test_only_explicit_offsets_on_a_fresh_checkpoint_are_seeded(
    tmp_path: Path, offsets: Any, state: str | None, seeded: bool
) -> None:
    if state is not None:
        (tmp_path / state).parent.mkdir(parents=True)
        (tmp_path / state).write_text("x")
    text = offsets if isinstance(offsets, str) else json.dumps(offsets)
    assert seed_initial_offsets(tmp_path, text) is seeded
    log = tmp_path / "sources" / "0" / "0"
    assert log.exists() == (seeded or state == "sources/0/0")
    if state == "sources/0/0":
        assert log.read_text() == "x"


def test_a_seed_that_cannot_be_written_leaves_the_pipeline_to_the_take_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = tmp_path / "ckpt"
    blocked.mkdir()
    (blocked / "sources").write_text("a file where a directory goes")
    assert seed_initial_offsets(blocked, json.dumps({"in": {"0": 1}})) is False
    assert "first offsets not written" in capsys.readouterr().err


def test_a_pipeline_that_cannot_be_built_ahead_is_left_to_the_take_over(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def bad(raw: Any, spec: Spec, r: int) -> Any:
        raise ValueError("no such column")

    monkeypatch.setattr("arfl.replica.standby.pipeline", bad)
    spec = _spec()
    assert build_ahead(None, spec, _Mode(), _cfg(spec, 0), _never()) is None  # type: ignore[arg-type]
    assert "pipeline not built ahead (ValueError: no such column)" in capsys.readouterr().err


def test_build_ahead_can_be_switched_off() -> None:
    spec = _spec(**{BUILD_AHEAD_KEY: False})
    mode = _Mode()
    assert build_ahead(None, spec, mode, _cfg(spec, 0), _never()) is None  # type: ignore[arg-type]
    assert mode.built == []


def _never() -> Any:
    import threading

    return threading.Event()
