"""Real-time mode and coordination-free modes: what a spec may ask for, and its task slots."""

from __future__ import annotations

from typing import Any

import pytest

from arfl.configs import realtime
from arfl.configs.load import parse_spec
from arfl.configs.realtime import (
    declared_slots,
    plan_slots,
    replica_master,
    slots_needed,
    slots_warning,
)
from arfl.configs.spec import Spec
from arfl.errors import SpecError
from arfl.registry import MODES, Entry, ModeInfo

FREE = "free-test"
"""A throwaway coordination-free active mode (the shape of ``active``), see :func:`free_mode`."""

WINDOW = {"window": {"size": "1s", "key": "user", "watermark": "500ms", "agg": {"n": "count(*)"}}}
SLIDING = {"window": {"size": "2s", "slide": "500ms", "key": "user", "agg": {"n": "count(*)"}}}


class _FreeReplication:
    pass


@pytest.fixture
def free_mode(monkeypatch: pytest.MonkeyPatch) -> str:
    """Register a coordination-free mode for one test (removed again afterwards)."""
    MODES.names()  # load the real modes first, so the registry does not reload over ours
    info = ModeInfo(
        "test: replicas agree on nothing",
        min_replicas=2,
        max_replicas=None,
        triggers=frozenset({"micro-batch", "realtime"}),
        active=True,
        coordination_free=True,
    )
    monkeypatch.setitem(MODES._entries, FREE, Entry(FREE, info, _FreeReplication))
    return FREE


def _raw(
    *,
    steps: list[dict[str, Any]] | None = None,
    mode: str = "passive",
    replicas: int | None = None,
    partitions: int = 2,
    master: str = "local-cluster[1,1,1024]",
    conf: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    **replication: Any,
) -> dict[str, Any]:
    repl: dict[str, Any] = {"mode": mode, **replication}
    if replicas is not None:
        repl["replicas"] = replicas
    return {
        "name": "t",
        "source": {"topic": "in", "partitions": partitions, "event_time": "ts", **(source or {})},
        "steps": steps if steps is not None else [{"filter": "amount > 10"}],
        "sink": {"topic": "out"},
        "replication": repl,
        "spark": {"master": master, "conf": conf or {}},
    }


def _problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as ei:
        parse_spec(raw, "t.toml")
    return ei.value.problems


def _at(problems: list[str], path: str) -> list[str]:
    return [p for p in problems if p.startswith(f"t.toml: {path}: ")]


# --- real-time mode, any mode ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["passive", "none"])
def test_realtime_refuses_a_transform_step_saying_why(mode: str) -> None:
    problems = _problems(
        _raw(mode=mode, trigger="realtime", steps=[{"filter": "x > 1"}, {"transform": "m:f"}])
    )
    [p] = _at(problems, "steps[1].transform")
    assert "allowlist" in p and "Python" in p
    assert 'trigger = "micro-batch"' in p  # what to do instead


def test_a_transform_runs_in_micro_batch_or_with_the_allowlist_check_off() -> None:
    parse_spec(_raw(steps=[{"transform": "m:f"}]))
    off = {"spark.sql.streaming.realTimeMode.allowlistCheck": "false"}
    parse_spec(_raw(trigger="realtime", steps=[{"transform": "m:f"}], conf=off))


@pytest.mark.parametrize("interval", ["1s", "500ms", "4999ms", "4.5s"])
def test_realtime_refuses_an_interval_below_sparks_minimum(interval: str) -> None:
    problems = _problems(_raw(trigger="realtime", trigger_interval=interval))
    [p] = _at(problems, "replication.trigger_interval")
    assert "minimum of 5s" in p
    assert "spark.sql.streaming.realTimeMode.minBatchDuration" in p
    assert "not a latency" in p  # why a user would want a small one, and why it does not help


@pytest.mark.parametrize("interval", ["0s", "5s", "10s", "1m"])
def test_realtime_accepts_0_as_the_default_and_5s_or_more(interval: str) -> None:
    spec = parse_spec(_raw(trigger="realtime", trigger_interval=interval))
    assert spec.replication.trigger == "realtime"


def test_micro_batch_intervals_below_5s_are_fine() -> None:
    parse_spec(_raw(trigger_interval="100ms"))


@pytest.mark.parametrize(("conf", "ok", "bad"), [("1000", "1s", "500ms"), (2000, "2s", "1s")])
def test_a_lower_min_batch_duration_in_spark_conf_is_honoured(
    conf: object, ok: str, bad: str
) -> None:
    c = {"spark.sql.streaming.realTimeMode.minBatchDuration": conf}
    parse_spec(_raw(trigger="realtime", trigger_interval=ok, conf=c))
    [p] = _at(
        _problems(_raw(trigger="realtime", trigger_interval=bad, conf=c)),
        "replication.trigger_interval",
    )
    assert f"minimum of {ok}" in p


@pytest.mark.parametrize("window", [WINDOW, SLIDING], ids=["tumbling", "sliding"])
def test_realtime_runs_window_aggregations(window: dict[str, Any]) -> None:
    spec = parse_spec(_raw(trigger="realtime", steps=[{"filter": "amount > 1"}, window]))
    assert spec.has_window and spec.replication.trigger == "realtime"


def test_realtime_window_needs_a_whole_number_of_shuffle_partitions() -> None:
    conf = {"spark.sql.shuffle.partitions": "auto"}
    problems = _problems(_raw(trigger="realtime", steps=[WINDOW], conf=conf))
    [p] = _at(problems, 'spark.conf."spark.sql.shuffle.partitions"')
    assert "'auto'" in p and "task slot" in p


# --- coordination-free modes, any trigger ---------------------------------------------------


@pytest.mark.parametrize("trigger", ["micro-batch", "realtime"])
def test_coordination_free_refuses_a_window_not_keyed_by_the_partitioning_key(
    free_mode: str, trigger: str
) -> None:
    window = {"window": {"size": "1s", "key": "amount", "agg": {"n": "count(*)"}}}
    problems = _problems(_raw(mode=free_mode, replicas=2, trigger=trigger, steps=[window]))
    [p] = _at(problems, "steps[0].window.key")
    assert "'amount' is not the partitioning key (source.key = 'user')" in p
    assert "several partitions" in p and "batches" in p  # the reason
    assert "'active-leaderless'" in p  # a mode that can run it
    assert ('trigger = "micro-batch" (shared' in p) == (trigger == "realtime")


def test_coordination_free_accepts_windows_keyed_by_the_partitioning_key(free_mode: str) -> None:
    for steps in ([WINDOW], [SLIDING], [{"filter": "amount > 1"}, WINDOW]):
        for trigger in ("micro-batch", "realtime"):
            parse_spec(_raw(mode=free_mode, replicas=2, trigger=trigger, steps=steps))
    region = {"window": {"size": "1s", "key": "region", "agg": {"n": "count(*)"}}}
    parse_spec(_raw(mode=free_mode, replicas=2, steps=[region], source={"key": "region"}))


@pytest.mark.parametrize(
    ("select", "key"),
    [
        (["user AS u", "amount"], "u"),
        (["`user` as `u`", "amount"], "u"),
        (["*"], "user"),
        (["user", "amount * 2 AS amount"], "user"),
        (["user"], "USER"),  # Spark resolves column names case-insensitively
    ],
)
def test_a_select_that_keeps_or_renames_the_key_is_fine(
    free_mode: str, select: list[str], key: str
) -> None:
    window = {"window": {"size": "1s", "key": key, "agg": {"n": "count(*)"}}}
    parse_spec(_raw(mode=free_mode, replicas=2, steps=[{"select": select}, window]))


@pytest.mark.parametrize(
    "select",
    [
        ["lower(user) AS user", "amount"],  # merges keys of several partitions
        ["*", "lower(user) AS user"],
        ["amount"],  # the key is gone
        ["user AS u", "amount AS user"],
    ],
)
def test_a_select_that_redefines_the_key_is_refused(free_mode: str, select: list[str]) -> None:
    problems = _problems(_raw(mode=free_mode, replicas=2, steps=[{"select": select}, WINDOW]))
    # A key the select drops is also an unknown column (arfl.configs.schema): said apart.
    [p] = [p for p in _at(problems, "steps[1].window.key") if "unknown column" not in p]
    assert "dropped or redefined by an earlier select step" in p


def test_coordination_free_refuses_transform_steps_under_any_trigger(free_mode: str) -> None:
    [p] = _at(
        _problems(_raw(mode=free_mode, replicas=2, steps=[{"transform": "m:f"}])),
        "steps[0].transform",
    )
    assert "cannot prove a Python function deterministic" in p


def test_modes_with_shared_batch_boundaries_keep_any_window_key() -> None:
    window = {"window": {"size": "1s", "key": "amount", "agg": {"n": "count(*)"}}}
    parse_spec(
        _raw(
            mode="active-leaderless",
            replicas=2,
            steps=[window, {"select": ["amount"]}],
            heartbeat_interval="100ms",
        )
    )
    parse_spec(_raw(mode="active-leaderless", replicas=2, steps=[{"transform": "m:f"}]))


def test_a_missing_event_time_is_reported_once(free_mode: str) -> None:
    raw = _raw(mode=free_mode, replicas=2, trigger="realtime", steps=[WINDOW])
    del raw["source"]["event_time"]
    problems = _problems(raw)
    assert len([p for p in problems if "event_time" in p]) == 1, problems


def test_every_realtime_and_coordination_free_problem_at_once(free_mode: str) -> None:
    window = {"window": {"size": "1s", "key": "amount", "agg": {"n": "count(*)"}}}
    raw = _raw(
        mode=free_mode,
        replicas=2,
        trigger="realtime",
        trigger_interval="1s",
        steps=[{"transform": "m:f"}, window],
    )
    raw["bogus"] = 1
    problems = _problems(raw)
    assert _at(problems, "bogus")
    assert _at(problems, "replication.trigger_interval")
    assert len(_at(problems, "steps[0].transform")) == 2  # RTM's allowlist, and determinism
    assert _at(problems, "steps[1].window.key")


# --- slots ----------------------------------------------------------------------------------


def _spec(**kw: Any) -> Spec:
    return parse_spec(_raw(**kw))


@pytest.mark.parametrize(
    ("master", "slots"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local-cluster[1,4,1024]", 4),
        ("local-cluster[2, 3, 512]", 6),
        ("spark://h:7077", None),
    ],
)
def test_declared_slots(master: str, slots: int | None) -> None:
    assert declared_slots(master) == slots


def test_local_star_declares_the_hosts_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realtime, "host_cores", lambda: 7)
    assert declared_slots("local[*]") == 7


def test_slots_needed_in_realtime_is_partitions_plus_shuffle_partitions_with_a_window() -> None:
    assert slots_needed(_spec(trigger="realtime", partitions=3)) == 3
    assert slots_needed(_spec(trigger="realtime", partitions=3, steps=[WINDOW])) == 3 + 2
    for shuffle in ("4", 4):
        conf = {"spark.sql.shuffle.partitions": shuffle}
        assert slots_needed(_spec(trigger="realtime", steps=[WINDOW], conf=conf)) == 2 + 4
        # shuffle partitions need no slot of their own without a window
        assert slots_needed(_spec(trigger="realtime", conf=conf)) == 2


def test_slots_needed_in_micro_batch_is_what_the_master_declares() -> None:
    assert slots_needed(_spec(master="local-cluster[2,3,1024]", steps=[WINDOW])) == 6
    assert slots_needed(_spec(master="local[3]", partitions=8)) == 3
    assert slots_needed(_spec(master="spark://h:7077")) == 1
    assert slots_needed(_spec(), master="local[5]") == 5


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("local-cluster[1,1,1024]", "local-cluster[1,4,1024]"),
        ("local-cluster[2,1,512]", "local-cluster[1,4,512]"),
        ("local[2]", "local[4]"),
        ("local", "local[4]"),
    ],
)
def test_replica_master_gives_realtime_a_slot_per_partition(master: str, expected: str) -> None:
    chosen, note = replica_master(_spec(trigger="realtime", partitions=4, master=master))
    assert chosen == expected
    assert note is not None and "\n" not in note
    assert master in note and "needs 4 (4 partitions)" in note and expected in note


def test_replica_master_counts_shuffle_partitions_with_a_window() -> None:
    spec = _spec(trigger="realtime", partitions=2, steps=[WINDOW])
    chosen, note = replica_master(spec)
    assert chosen == "local-cluster[1,4,1024]"
    assert note is not None and "(2 partitions + 2 shuffle partitions)" in note


@pytest.mark.parametrize(
    "master", ["local-cluster[2,2,1024]", "local-cluster[1,8,1024]", "local[4]"]
)
def test_replica_master_keeps_a_master_with_enough_slots(master: str) -> None:
    assert replica_master(_spec(trigger="realtime", partitions=4, master=master)) == (master, None)


def test_replica_master_leaves_micro_batch_alone() -> None:
    spec = _spec(partitions=8, steps=[WINDOW])
    assert replica_master(spec) == ("local-cluster[1,1,1024]", None)


def test_replica_master_keeps_a_cluster_master_and_says_what_it_needs() -> None:
    spec = _spec(trigger="realtime", partitions=2, steps=[WINDOW], master="spark://h:7077")
    chosen, note = replica_master(spec)
    assert chosen == "spark://h:7077"
    assert note is not None
    assert "needs 4 free per replica" in note and "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT" in note


def test_replica_master_takes_the_master_override() -> None:
    spec = _spec(trigger="realtime", partitions=3)
    assert replica_master(spec, "local[1]")[0] == "local[3]"
    assert replica_master(spec, "spark://h:7077")[0] == "spark://h:7077"


def test_slots_warning_above_4_slots_per_core(free_mode: str) -> None:
    # 2 replicas x (2 partitions + 2 shuffle partitions) = 8 slots: at the limit of 2 cores
    spec = _spec(mode=free_mode, replicas=2, trigger="realtime", steps=[WINDOW])
    assert slots_warning(spec, 2) is None
    warning = slots_warning(spec, 1)
    assert warning is not None
    assert "2 replicas \u00d7 4 task slots = 8 on 1 core" in warning
    assert "RTM tasks mostly wait on Kafka" in warning and "compete for CPU" in warning
    # one more partition tips 2 cores over
    spec = _spec(mode=free_mode, replicas=2, trigger="realtime", partitions=3, steps=[WINDOW])
    assert slots_warning(spec, 2) is not None


def test_slots_warning_counts_the_slots_the_master_declares() -> None:
    # micro-batch: the master's slots; RTM with a bigger master than needed: the master's too
    spec = _spec(mode="active-leaderless", replicas=2, master="local-cluster[1,5,1024]")
    warning = slots_warning(spec, 2)
    assert warning is not None and "2 replicas \u00d7 5 task slots = 10 on 2 cores" in warning
    assert "RTM" not in warning
    spec = _spec(trigger="realtime", partitions=1, master="local[9]")
    assert slots_warning(spec, 2) is not None


def test_no_slots_warning_for_a_cluster_master(free_mode: str) -> None:
    spec = _spec(
        mode=free_mode, replicas=4, trigger="realtime", partitions=16, master="spark://h:7077"
    )
    assert slots_warning(spec, 1) is None


def test_plan_describes_what_a_spec_asks_for(free_mode: str) -> None:
    spec = _spec(mode=free_mode, replicas=2, trigger="realtime", steps=[WINDOW])
    plan = plan_slots(spec, 2)
    assert plan.describe() == (  # the standby is arfl's masking default (configs/masking)
        "2 replicas + 1 standby \u00d7 local-cluster[1,4,1024] "
        "(RTM: 2 partitions + 2 shuffle partitions = 4 task slots each) on 2 cores"
    )
    assert plan.note is not None and plan.warning is None
    assert plan_slots(spec, 1).warning is not None

    per_record = plan_slots(_spec(trigger="realtime", partitions=1, master="local[2]"), 4)
    assert per_record.describe() == (
        "1 replica \u00d7 local[2] (RTM: 1 partition = 1 task slot each) on 4 cores"
    )
    assert per_record.note is None

    micro = plan_slots(_spec(mode="active-leaderless", replicas=2, steps=[WINDOW]), 2)
    assert micro.describe() == (
        "2 replicas \u00d7 local-cluster[1,1,1024] (micro-batch: 1 task slot each) on 2 cores"
    )
    cluster = plan_slots(_spec(master="spark://h:7077"), 2)
    assert cluster.describe() == (
        "1 replica \u00d7 spark://h:7077 (micro-batch: the cluster's task slots) on 2 cores"
    )
    spare = _spec(mode="active", replicas=2, trigger="realtime", partitions=1, master="local[2]")
    spare = spare.model_copy(
        update={"replication": spare.replication.model_copy(update={"standby": 1})}
    )
    assert plan_slots(spare, 2).describe() == (
        "2 replicas + 1 standby \u00d7 local[2] (RTM: 1 partition = 1 task slot each) on 2 cores"
    )


def test_mode_active_is_held_to_the_coordination_free_rules() -> None:
    assert MODES.info("active").coordination_free
    window = {"window": {"size": "1s", "key": "amount", "agg": {"n": "count(*)"}}}
    for trigger in ("micro-batch", "realtime"):
        problems = _problems(
            _raw(mode="active", replicas=2, trigger=trigger, steps=[{"transform": "m:f"}, window])
        )
        assert _at(problems, "steps[1].window.key"), problems
        assert any("deterministic" in p for p in _at(problems, "steps[0].transform")), problems
        parse_spec(_raw(mode="active", replicas=2, trigger=trigger, steps=[WINDOW]))


def _disordered(mode: str, watermark: str, disorder: str) -> dict[str, Any]:
    raw = _raw(
        mode=mode,
        replicas=2,
        source={"event_time": "event_ts"},
        steps=[{"window": {"size": "1s", "key": "user", "watermark": watermark,
                           "agg": {"n": "count(*)"}}}],
    )  # fmt: skip
    raw["workload"] = {
        "disorder": disorder,
        "fields": {"user": {"kind": "key", "cardinality": 5}, "event_ts": {"kind": "event-time"}},
    }
    return raw


def test_coordination_free_window_with_a_watermark_below_the_disorder_is_refused() -> None:
    # A row 800 ms out of order behind a 500 ms watermark is dropped or kept depending on which
    # earlier batch moved the watermark; replicas without agreed batches would disagree.
    (msg,) = _at(_problems(_disordered("active", "500ms", "800ms")), "steps[0].window.watermark")
    assert "below workload.disorder (800ms)" in msg
    assert "active-leaderless" in msg and "watermark >= disorder" in msg
    # Enough watermark, or agreed batches: accepted.
    assert parse_spec(_disordered("active", "800ms", "800ms")).workload.disorder == 0.8
    assert parse_spec(_disordered("active-leaderless", "500ms", "800ms"))
