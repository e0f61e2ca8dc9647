"""The executor warm-up of a real-time replica: its topic, and that a failed warm-up never
stops the replica (it only saves time)."""

from __future__ import annotations

from typing import Any

import pytest

from arfl.replica import driver, warmup


def test_warmup_topic_is_the_replicas_own() -> None:
    assert warmup.warmup_topic("out.r1") == "out.r1.warmup"
    assert warmup.warmup_topic("out.r0") != warmup.warmup_topic("out.r1")


def test_failed_warm_up_is_logged_and_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(spark: Any, sink_options: dict[str, str], tasks: int) -> warmup.Warmup:
        raise RuntimeError("kafka unreachable")

    monkeypatch.setattr(driver, "warm_up", boom)
    driver._warm_up(object(), {"topic": "t", "kafka.bootstrap.servers": "b"}, 2)
    err = capsys.readouterr().err
    assert "executor warm-up skipped" in err and "kafka unreachable" in err


def test_warm_up_logs_what_it_did(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}

    def fake(spark: Any, sink_options: dict[str, str], tasks: int) -> warmup.Warmup:
        seen.update(options=sink_options, tasks=tasks)
        return warmup.Warmup(topic="t.warmup", records=200, write_s=1.0, read_s=0.5)

    monkeypatch.setattr(driver, "warm_up", fake)
    driver._warm_up(object(), {"topic": "t", "kafka.bootstrap.servers": "b"}, 3)
    assert seen == {"options": {"topic": "t", "kafka.bootstrap.servers": "b"}, "tasks": 3}
    assert "executors warmed up in" in capsys.readouterr().err


class _FakeQuery:
    def __init__(self, dies: bool = False) -> None:
        self.isActive = not dies
        self.stops = 0

    def exception(self) -> str:
        return "boom in the query"

    def stop(self) -> None:
        self.stops += 1
        self.isActive = False


class _FakeSpark:
    """What ``_rehearse`` touches: active stages (once ``stages_after`` polls passed) and the
    session's active queries."""

    def __init__(self, query: _FakeQuery, stages: bool = True) -> None:
        self.query, self.stages = query, stages
        outer = self

        class _Tracker:
            def getActiveStageIds(self) -> list[int]:
                return [3] if outer.stages and outer.query.isActive else []

        class _Ctx:
            def statusTracker(self) -> _Tracker:
                return _Tracker()

        class _Streams:
            @property
            def active(self) -> list[_FakeQuery]:
                return [outer.query] if outer.query.isActive else []

        self.sparkContext, self.streams = _Ctx(), _Streams()


def _rehearse(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, spark: _FakeSpark, stop: Any = None
) -> dict[str, Any]:
    import threading
    from pathlib import Path

    from arfl.configs.spec import parse_spec
    from arfl.replica.modes.base import get_mode

    seen: dict[str, Any] = {}

    def fake_source(spark: Any, spec: Any, ctx: Any, starting: str) -> str:
        seen.update(starting=starting, topic=ctx.output_topic, ckpt=ctx.checkpoint_dir)
        Path(ctx.checkpoint_dir).mkdir(parents=True)  # what Spark would write there
        return "raw"

    class _Writer:
        def start(self) -> _FakeQuery:
            return spark.query

    monkeypatch.setattr(driver, "kafka_source", fake_source)
    monkeypatch.setattr(driver, "_writer", lambda *a, **k: _Writer())
    monkeypatch.setattr(driver, "REHEARSAL_TASKS_S", 0.01)
    monkeypatch.setattr(driver, "REHEARSAL_MAX_S", 0.2)
    raw = {"name": "r", "source": {"topic": "in"}, "sink": {"topic": "out"},
           "replication": {"mode": "none", "trigger": "realtime"}}  # fmt: skip
    spec = parse_spec(raw, "r.toml")
    cfg = driver.DriverConfig(
        spec=spec.model_dump(mode="json", by_alias=True), replica=0, bootstrap="b:9",
        output_topic="out.standby0", checkpoint_dir=str(tmp_path / "ck"), progress_file="p",
        app_id_file="a", master="local[2]", standby=True,
    )  # fmt: skip
    driver._rehearse(spark, spec, get_mode("none"), cfg, stop or threading.Event())
    return seen


def test_a_rehearsal_reads_from_the_input_end_whatever_the_mode_and_cleans_up(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Mode 'none' reads from the earliest offset on a first start: the rehearsal must not.
    spark = _FakeSpark(_FakeQuery())
    seen = _rehearse(tmp_path, monkeypatch, spark)
    assert seen["starting"] == "latest" and seen["topic"] == "out.standby0.warmup"
    assert not seen["ckpt"].exists()  # the throwaway checkpoint is gone
    assert spark.query.stops >= 1 and not spark.query.isActive
    assert "rehearsed the pipeline in" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("query", "stages", "said"),
    [(_FakeQuery(dies=True), True, "its query ended: boom in the query"),
     (_FakeQuery(), False, "no tasks after 0.2s")],
)  # fmt: skip
def test_a_rehearsal_that_did_not_run_its_tasks_says_skipped(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    query: _FakeQuery,
    stages: bool,
    said: str,
) -> None:
    spark = _FakeSpark(query, stages=stages)
    seen = _rehearse(tmp_path, monkeypatch, spark)
    err = capsys.readouterr().err
    assert "rehearsed the pipeline" not in err and "rehearsal skipped after" in err, err
    assert said in err, err
    assert not seen["ckpt"].exists() and not query.isActive


def test_a_stopped_standby_stops_rehearsing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading

    stop = threading.Event()
    stop.set()
    spark = _FakeSpark(_FakeQuery(), stages=False)
    _rehearse(tmp_path, monkeypatch, spark, stop)
    assert "rehearsal skipped" in (err := capsys.readouterr().err) and "stopped" in err
    assert not spark.query.isActive
