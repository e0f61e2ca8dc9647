"""The executor warm-up of a real-time replica: its topic, and that a failed warm-up never
stops the replica (it only saves time)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from arfl.replica import app, standby, warmup


def test_warmup_topic_is_the_replicas_own() -> None:
    assert warmup.warmup_topic("out.r1") == "out.r1.warmup"
    assert warmup.warmup_topic("out.r0") != warmup.warmup_topic("out.r1")


def test_failed_warm_up_is_logged_and_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(spark: Any, sink_options: dict[str, str], tasks: int) -> warmup.Warmup:
        raise RuntimeError("kafka unreachable")

    monkeypatch.setattr(app, "warm_up", boom)
    app.warm_up_logged(object(), {"topic": "t", "kafka.bootstrap.servers": "b"}, 2)
    err = capsys.readouterr().err
    assert "executor warm-up skipped" in err and "kafka unreachable" in err


def test_warm_up_logs_what_it_did(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}

    def fake(spark: Any, sink_options: dict[str, str], tasks: int) -> warmup.Warmup:
        seen.update(options=sink_options, tasks=tasks)
        return warmup.Warmup(topic="t.warmup", records=200, write_s=1.0, read_s=0.5)

    monkeypatch.setattr(app, "warm_up", fake)
    app.warm_up_logged(object(), {"topic": "t", "kafka.bootstrap.servers": "b"}, 3)
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
    """What ``rehearse`` touches: active stages (once ``stages_after`` polls passed) and the
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
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    spark: _FakeSpark,
    stop: Any = None,
    *,
    rehearsal_input: bool = False,
    outputs: list[int] | None = None,
    feed_fails: bool = False,
    tasks_s: float = 0.01,
) -> dict[str, Any]:
    """Run ``rehearse`` on fakes. ``rehearsal_input``: the supervisor gave it 200 events
    (the default), its output topic holding ``outputs`` records at successive looks (then the
    last again)."""
    import threading
    from pathlib import Path

    from arfl.configs.load import parse_spec
    from arfl.replica.modes.base import get_mode

    seen: dict[str, Any] = {"closed": 0}

    def fake_source(
        spark: Any, spec: Any, ctx: Any, starting: str, topic: str | None = None
    ) -> str:
        seen.update(starting=starting, topic=ctx.output_topic, ckpt=ctx.checkpoint_dir, src=topic)
        Path(ctx.checkpoint_dir).mkdir(parents=True)  # what Spark would write there
        return "raw"

    class _Writer:
        def start(self) -> _FakeQuery:
            return spark.query

    def fake_feed(spec: Any, bootstrap: str, topic: str, events: Any) -> int:
        if feed_fails:
            raise RuntimeError("no broker")
        seen.update(fed=topic, bootstrap=bootstrap, events=events)
        return len(events)

    looks = list(outputs or [200])

    class _Probe:
        def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
            seen.update(probe=(bootstrap, topic, partitions))

        def __call__(self) -> dict[int, int]:
            return {0: looks.pop(0) if len(looks) > 1 else looks[0]}

        def close(self) -> None:
            seen["closed"] += 1

    monkeypatch.setattr(standby, "kafka_source", fake_source)
    monkeypatch.setattr(
        standby, "query_writer", lambda _raw, spec, *a, **k: seen.update(spec=spec) or _Writer()
    )
    monkeypatch.setattr(standby, "_write_rehearsal_input", fake_feed)
    monkeypatch.setattr(standby, "EndOffsetProbe", _Probe)
    monkeypatch.setattr(standby, "ensure_topic", lambda *a: seen.update(ensured=a))
    monkeypatch.setattr(standby, "REHEARSAL_TASKS_S", tasks_s)
    monkeypatch.setattr(standby, "REHEARSAL_MAX_S", 0.2)
    monkeypatch.setattr(standby, "REHEARSAL_RESULTS_S", 0.3)
    monkeypatch.setattr(standby, "REHEARSAL_AFTER_RESULT_S", 0.01)
    raw = {"name": "r", "source": {"topic": "in"}, "sink": {"topic": "out"},
           "replication": {"mode": "none", "trigger": "realtime"}}  # fmt: skip
    spec = parse_spec(raw, "r.toml")
    events = [["u1", '{"seq":0}'], ["u2", '{"seq":1}']] * 100 if rehearsal_input else []
    cfg = app.DriverConfig(
        spec=spec.model_dump(mode="json", by_alias=True), replica=0, bootstrap="b:9",
        output_topic="out.standby0", checkpoint_dir=str(tmp_path / "ck"), progress_file="p",
        app_id_file="a", master="local[2]", standby=True, rehearsal_input=events,
    )  # fmt: skip
    standby.rehearse(spark, spec, get_mode("none"), cfg, stop or threading.Event())
    return seen


def test_a_rehearsal_without_input_reads_from_the_input_end_whatever_the_mode_and_cleans_up(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Mode 'none' reads from the earliest offset on a first start: the rehearsal must not.
    spark = _FakeSpark(_FakeQuery())
    seen = _rehearse(tmp_path, monkeypatch, spark)
    assert seen["starting"] == "latest" and seen["topic"] == "out.standby0.warmup"
    assert seen["src"] is None and "fed" not in seen  # the input topic, nothing written
    assert not seen["ckpt"].exists()  # the throwaway checkpoint is gone
    assert spark.query.stops >= 1 and not spark.query.isActive
    err = capsys.readouterr().err
    assert "rehearsed the pipeline in" in err and "on the input's end, no records" in err, err


def test_a_rehearsal_runs_its_own_input_records_through_until_a_result(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spark = _FakeSpark(_FakeQuery())
    # The warm-up's 200 records are on the output topic before; 1 and then 104 results.
    seen = _rehearse(
        tmp_path, monkeypatch, spark, rehearsal_input=True, outputs=[200, 200, 201, 304]
    )
    assert seen["fed"] == "out.standby0.warmup.in" == standby.rehearsal_input_topic("out.standby0")
    assert len(seen["events"]) == 200 and seen["bootstrap"] == "b:9"
    assert seen["starting"] == "earliest" and seen["src"] == "out.standby0.warmup.in"
    assert seen["probe"] == ("b:9", "out.standby0.warmup", 1) and seen["closed"] == 1
    assert seen["ensured"] == ("b:9", "out.standby0.warmup", 1)
    assert not seen["ckpt"].exists() and not spark.query.isActive
    err = capsys.readouterr().err
    assert "rehearsed the pipeline in" in err and "200 input records, first result" in err, err
    assert "104 results" in err, err
    # its query's batch is long (a short interval would end before cold tasks start)
    assert seen["spec"].replication.trigger_interval == standby.REHEARSAL_BATCH_S


def test_a_rehearsal_whose_records_gave_no_result_says_so(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spark = _FakeSpark(_FakeQuery())
    seen = _rehearse(tmp_path, monkeypatch, spark, rehearsal_input=True, outputs=[200])
    assert seen["closed"] == 1 and not spark.query.isActive
    err = capsys.readouterr().err
    assert "rehearsed the pipeline in" in err and "no result within 0.3s" in err, err


def _spec(**over: Any) -> Any:
    from arfl.configs.load import parse_spec

    raw: dict[str, Any] = {
        "name": "r", "source": {"topic": "in"}, "sink": {"topic": "out"},
        "replication": {"mode": "active", "replicas": 2, "trigger": "realtime"},
        "workload": {"rate": 100, "duration": "10s", "keys": 7, "seed": 3},
    }  # fmt: skip
    for k, v in over.items():
        raw[k] = raw.get(k, {}) | v
    return parse_spec(raw, "r.toml")


DECLARED = {
    "workload": {
        "fields": {
            "user": {"kind": "key", "cardinality": 20},
            "amount": {"kind": "float", "min": 0.0, "max": 9.0},
        }
    }
}


@pytest.mark.parametrize("over", [{}, DECLARED], ids=["default", "declared"])
def test_rehearsal_events_are_what_the_injector_sends(over: dict[str, Any]) -> None:
    from arfl.orchestrate.drivers import rehearsal_events
    from arfl.workload.generate import EventShape
    from arfl.workload.injector import Injector, InjectorConfig, encode_event, event_fields

    spec = _spec(**over)
    got = rehearsal_events(spec)
    assert len(got) == standby.REHEARSAL_RECORDS and len({k for k, _ in got}) > 1

    sent: list[tuple[str, str]] = []

    class _Producer:
        def produce(self, topic: str, *, key: bytes, value: bytes, on_delivery: Any) -> None:
            sent.append((key.decode(), value.decode()))

    cfg = InjectorConfig.from_workload(
        spec.workload, bootstrap="b:9", topic="in", shape=EventShape.from_spec(spec)
    )
    injector = Injector(cfg, producer=_Producer())  # type: ignore[arg-type]
    for seq in (0, 4, 199):
        ts = json.loads(got[seq][1])["ts"]
        # The injector's send of event seq, scheduled so that its intended time is ts.
        injector._send(seq, ts - seq * 1000 // spec.workload.rate, ts)
        assert sent[-1] == tuple(got[seq]), (seq, sent[-1], got[seq])
    if not over:  # the default event, field by field
        user, amount = event_fields(3, 4, 7)
        ts = json.loads(got[4][1])["ts"]
        assert got[4] == [user, encode_event(4, user, amount, ts, ts).decode()]


def test_rehearsal_events_only_where_a_rehearsal_reads_them() -> None:
    from arfl.orchestrate.drivers import rehearsal_events

    assert rehearsal_events(_spec(spark={"conf": {"arfl.rehearsalInput": False}})) == []
    assert rehearsal_events(_spec(spark={"conf": {"arfl.standbyRehearsal": False}})) == []
    assert rehearsal_events(_spec(replication={"trigger": "micro-batch"})) == []
    # A replayed source: its records come from the user's topic, the injector makes none (the
    # same spec without the replay does get events).
    from arfl.configs.load import parse_spec

    raw: dict[str, Any] = {
        "name": "r", "source": {"topic": "in"}, "sink": {"topic": "out"},
        "replication": {"mode": "active", "replicas": 2, "trigger": "realtime"},
        "workload": {"duration": "10s", "fields": {"user": {"kind": "key", "cardinality": 10},
                                                   "created": {"kind": "event-time"}}},
    }  # fmt: skip
    assert len(rehearsal_events(parse_spec(raw, "r.toml"))) == standby.REHEARSAL_RECORDS
    raw["source"]["replay"] = {"topic": "ext", "start": {"0": 0}, "end": "2026-01-05T10:00:00Z",
                               "time_field": "created"}  # fmt: skip
    replayed = parse_spec(raw, "r.toml")
    assert replayed.source.replay is not None
    assert rehearsal_events(replayed) == []


@pytest.mark.parametrize("rehearsal_input", [False, True])
@pytest.mark.parametrize(
    ("dies", "stages", "said"),
    [(True, True, "its query ended: boom in the query"),
     (False, False, "no tasks after 0.2s")],
)  # fmt: skip
def test_a_rehearsal_that_did_not_run_its_tasks_says_skipped(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    dies: bool,
    stages: bool,
    said: str,
    rehearsal_input: bool,
) -> None:
    query = _FakeQuery(dies=dies)
    spark = _FakeSpark(query, stages=stages)
    seen = _rehearse(tmp_path, monkeypatch, spark, rehearsal_input=rehearsal_input)
    assert seen["closed"] == (1 if rehearsal_input else 0)
    err = capsys.readouterr().err
    assert "rehearsed the pipeline" not in err and "rehearsal skipped after" in err, err
    assert said in err, err
    assert not seen["ckpt"].exists() and not query.isActive


@pytest.mark.parametrize("rehearsal_input", [False, True])
@pytest.mark.parametrize("when", ["before its tasks", "while it waits"])
def test_a_stopped_standby_stops_rehearsing(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    rehearsal_input: bool,
    when: str,
) -> None:
    import threading

    stop = threading.Event()
    if when == "before its tasks":
        stop.set()
    else:  # SIGTERM once its tasks are up: while it waits for them / for a result
        threading.Timer(0.05, stop.set).start()
    spark = _FakeSpark(_FakeQuery(), stages=when != "before its tasks")
    seen = _rehearse(
        tmp_path, monkeypatch, spark, stop, rehearsal_input=rehearsal_input, tasks_s=5.0
    )
    assert "rehearsal skipped" in (err := capsys.readouterr().err) and "stopped" in err, err
    assert not spark.query.isActive and seen["closed"] == (1 if rehearsal_input else 0)


def test_a_rehearsal_whose_input_could_not_be_written_reads_the_input_end(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spark = _FakeSpark(_FakeQuery())
    seen = _rehearse(tmp_path, monkeypatch, spark, rehearsal_input=True, feed_fails=True)
    assert seen["starting"] == "latest" and seen["src"] is None and "probe" not in seen
    err = capsys.readouterr().err
    assert "rehearsal input not written (RuntimeError: no broker)" in err, err
    assert "rehearsed the pipeline in" in err and "on the input's end, no records" in err, err


def test_rehearsal_input_goes_to_a_topic_made_like_the_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arfl.configs.load import parse_spec
    from arfl.stack.clients import producer_config

    made: dict[str, Any] = {}
    monkeypatch.setattr(
        standby, "ensure_topic", lambda b, t, n, **kw: made.update(topic=(b, t, n, kw))
    )

    class _Producer:
        def __init__(self, conf: dict[str, Any]) -> None:
            made["conf"] = conf

        def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
            made.setdefault("sent", []).append((topic, key, value))
            on_delivery(None, None)

        def flush(self, timeout: float) -> int:
            made["flushed"] = True
            return 0

    monkeypatch.setattr(standby, "Producer", _Producer)
    raw = {"name": "r", "source": {"topic": "in", "partitions": 3}, "sink": {"topic": "out"}}
    spec = parse_spec(raw, "r.toml")
    n = standby._write_rehearsal_input(spec, "b:9", "t.in", [["u1", "{}"], ["u2", "{}"]])
    assert n == 2 and made["topic"] == ("b:9", "t.in", 3, {"log_append_time": True})
    assert made["sent"] == [("t.in", b"u1", b"{}"), ("t.in", b"u2", b"{}")]
    # the injector's settings: keys land in the partitions the input's would
    assert made["conf"] == producer_config("b:9") and made["flushed"] is True


def test_rehearsal_input_not_delivered_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from arfl.configs.load import parse_spec

    monkeypatch.setattr(standby, "ensure_topic", lambda *a, **kw: None)

    class _Producer:
        def __init__(self, conf: dict[str, Any]) -> None:
            pass

        def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
            on_delivery("broker down", None)

        def flush(self, timeout: float) -> int:
            return 0

    monkeypatch.setattr(standby, "Producer", _Producer)
    spec = parse_spec({"name": "r", "source": {"topic": "in"}, "sink": {"topic": "out"}}, "r")
    with pytest.raises(RuntimeError, match="1 failed"):
        standby._write_rehearsal_input(spec, "b:9", "t.in", [["u1", "{}"]])


def test_a_standby_stopped_while_its_session_started_neither_warms_up_nor_rehearses(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM that came while the Spark session started (the run stopped meanwhile): the
    standby leaves at once instead of spending its warm-up and rehearsal (13-20 s) first."""
    import threading
    from pathlib import Path
    from types import SimpleNamespace

    from arfl.configs.load import parse_spec

    called: list[str] = []
    monkeypatch.setattr(standby, "warm_up_logged", lambda *a: called.append("warm-up"))
    monkeypatch.setattr(standby, "rehearse", lambda *a: called.append("rehearse"))
    raw = {"name": "r", "source": {"topic": "in"}, "sink": {"topic": "out"},
           "replication": {"mode": "active", "replicas": 2, "standby": 1,
                           "trigger": "realtime"}}  # fmt: skip
    spec = parse_spec(raw, "r.toml")
    app_file = tmp_path / "standby-0.app.json"
    cfg = app.DriverConfig(
        spec=spec.model_dump(mode="json", by_alias=True), replica=0, bootstrap="b:9",
        output_topic="out.standby0", checkpoint_dir=str(tmp_path / "ck"), progress_file="p",
        app_id_file=str(app_file), master="local[2]", standby=True,
        assignment_file=str(tmp_path / "standby-0.assign.json"),
    )  # fmt: skip
    sc = SimpleNamespace(applicationId="app-1", uiWebUrl=None, defaultParallelism=2)
    stop = threading.Event()
    stop.set()
    assert standby.run_standby(cfg, SimpleNamespace(sparkContext=sc), stop, 1.0) is None
    assert called == []
    assert "ready" not in json.loads(Path(app_file).read_text())  # never reported ready
