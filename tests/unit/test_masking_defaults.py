"""The masking defaults arfl sets for a coordination-free real-time spec (configs/masking)."""

from __future__ import annotations

from typing import Any

import pytest

from arfl.configs.load import parse_spec, saved_spec
from arfl.configs.masking import MASKING_INTERVAL_S, STATELESS_INTERVAL_S, chosen_defaults
from arfl.errors import ArflError

WINDOW = {"window": {"size": "2s", "key": "user", "agg": {"n": "count(*)"}}}
SLIDING = {"window": {"size": "2s", "slide": "1s", "key": "user", "agg": {"n": "count(*)"}}}
LONG_WINDOW = {"window": {"size": "1m", "key": "user", "agg": {"n": "count(*)"}}}
SKU_WINDOW = {
    "window": {"size": "1s", "key": "sku", "watermark": "300ms", "agg": {"n": "count(*)"}}
}
DECLARED: dict[str, Any] = {
    "source": {"key": "sku", "event_time": "event_ts"},
    "workload": {
        "fields": {"sku": {"kind": "key", "cardinality": 50}, "event_ts": {"kind": "event-time"}}
    },
}


def _raw(**replication: Any) -> dict[str, Any]:
    return {
        "name": "m",
        "source": {"topic": "in", "partitions": 2},
        "steps": [{"filter": "amount > 10"}],
        "sink": {"topic": "out"},
        "replication": {"mode": "active", "replicas": 2, "trigger": "realtime", **replication},
        "chaos": [{"at": "20s", "fault": "kill-replica", "replica": 0}],
        "workload": {"duration": "240s"},
    }


def test_an_active_realtime_spec_without_the_keys_gets_a_standby_and_a_long_interval() -> None:
    spec = parse_spec(_raw())
    assert spec.replication.standby == 1
    assert spec.replication.trigger_interval == STATELESS_INTERVAL_S
    keys = [c.key for c in spec.chosen_defaults]
    assert keys == ["replication.trigger_interval", "replication.standby"]
    # The resolved spec (the run directory's spec.json) carries them: a replica reading it back
    # runs with the same values.
    again = saved_spec(spec.model_dump(mode="json", by_alias=True))
    assert again.replication.standby == 1 and again.replication.trigger_interval == 60.0


@pytest.mark.parametrize(
    ("change", "interval"),
    [
        ({}, STATELESS_INTERVAL_S),
        ({"resume": "output"}, STATELESS_INTERVAL_S),
        # It replays from its own checkpoint: a longer interval lengthens the replay.
        ({"resume": "checkpoint"}, MASKING_INTERVAL_S),
        # One tumbling window on generated input resumes at a window's start: ~a window replayed.
        ({"steps": [WINDOW]}, STATELESS_INTERVAL_S),
        ({"steps": [{"filter": "amount > 10"}, WINDOW]}, STATELESS_INTERVAL_S),
        ({"steps": [WINDOW], "resume": "window"}, STATELESS_INTERVAL_S),
        # Any other window keeps state and replays from a peer's checkpoint.
        ({"steps": [WINDOW], "resume": "peer"}, MASKING_INTERVAL_S),
        ({"steps": [SLIDING]}, MASKING_INTERVAL_S),
        ({"steps": [LONG_WINDOW]}, MASKING_INTERVAL_S),
        # Declared fields: their event-time field, unless it lags the send time by a disorder.
        ({"steps": [SKU_WINDOW], **DECLARED}, STATELESS_INTERVAL_S),
        ({"steps": [SKU_WINDOW], **DECLARED, "workload": {**DECLARED["workload"],
                                                          "disorder": "300ms"}},
         MASKING_INTERVAL_S),
    ],
)  # fmt: skip
def test_a_pipeline_that_replays_little_gets_the_longer_interval(
    change: dict[str, Any], interval: float
) -> None:
    raw = _raw(**{k: v for k, v in change.items() if k not in ("steps", "workload", "source")})
    if "steps" in change:
        raw["steps"] = change["steps"]
        raw["source"]["event_time"] = "ts"
    raw["source"].update(change.get("source", {}))
    raw["workload"].update(change.get("workload", {}))
    spec = parse_spec(raw)
    assert spec.replication.trigger_interval == interval
    fresh = spec.resumes_from_output or spec.resumes_from_window_start
    assert fresh == (interval == STATELESS_INTERVAL_S)
    assert not (spec.resumes_from_output and spec.resumes_from_window_start)
    assert spec.resumes_from_peer == (spec.has_window and not fresh)


def test_what_the_user_wrote_is_kept() -> None:
    spec = parse_spec(_raw(standby=0, trigger_interval="5s"))
    assert spec.replication.standby == 0 and spec.replication.trigger_interval == 5.0
    assert spec.chosen_defaults == ()


@pytest.mark.parametrize(
    ("change", "standby"),
    [
        ({"spark": {"target": "docker"}}, True),
        (
            {
                "spark": {"target": "docker"},
                "chaos": [{"at": "20s", "fault": "partition", "replica": 0, "duration": "2s"}],
            },
            True,
        ),
        ({"spark": {"master": "spark://h:7077"}}, False),
        ({"replication": {"restart": False}}, False),
        ({"chaos": [{"at": "20s", "fault": "partition", "replica": 0, "duration": "2s"}]}, False),
        ({"spark": {"master": "local-cluster[1,2,1024]"}}, True),
    ],
)
def test_a_standby_only_where_one_can_run(change: dict[str, Any], standby: bool) -> None:
    raw = _raw()
    for section, value in change.items():
        raw[section] = {**raw.get(section, {}), **value} if isinstance(value, dict) else value
    keys = [c.key for c in chosen_defaults(raw)]
    expected = ["replication.trigger_interval"] + (["replication.standby"] if standby else [])
    assert keys == expected


@pytest.mark.parametrize(
    "replication",
    [
        {"mode": "active", "replicas": 2},  # micro-batch
        {"mode": "passive", "replicas": 1, "trigger": "realtime"},
        {"mode": "none", "trigger": "realtime"},
    ],
)
def test_nothing_is_chosen_outside_coordination_free_realtime(replication: dict[str, Any]) -> None:
    raw = _raw()
    raw["replication"] = replication
    raw["chaos"] = []
    spec = parse_spec(raw)
    assert spec.chosen_defaults == () and spec.replication.standby == 0
    assert spec.replication.trigger_interval == 0.0


@pytest.mark.parametrize("resume", [None, "auto", "output", "checkpoint", "peer", "window"])
@pytest.mark.parametrize(
    "steps",
    [
        None,  # no steps key: a pipeline that forwards its input
        [],
        [{"filter": "amount > 10"}, {"select": ["user", "amount", "ts"]}],
        [{"filter": "amount > 10"}, WINDOW],
        [SLIDING],
        [LONG_WINDOW],
        [WINDOW, {"filter": "n > 1"}],
    ],
)
def test_the_raw_rule_agrees_with_the_parsed_spec(
    steps: list[dict[str, Any]] | None, resume: str | None
) -> None:
    """The interval is chosen on the raw spec, before it is parsed: it must say what the parsed
    spec says of resuming at the output frontier, for every kind of pipeline."""
    raw = _raw(**({} if resume is None else {"resume": resume}))
    raw["source"]["event_time"] = "ts"
    if steps is None:
        del raw["steps"]
    else:
        raw["steps"] = steps
    try:
        spec = parse_spec(raw)
    except ArflError:
        pytest.skip("a spec the rules refuse (resume = output or window where it cannot be)")
    fresh = spec.resumes_from_output or spec.resumes_from_window_start
    want = STATELESS_INTERVAL_S if fresh else MASKING_INTERVAL_S
    assert spec.replication.trigger_interval == want


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"steps": [SLIDING]}, "a sliding window shares events"),
        ({"steps": [LONG_WINDOW]}, "a window longer than 10 s"),
        ({"steps": [WINDOW], "workload": {"late": 0.1}}, "workload.disorder or workload.late"),
        ({"steps": [WINDOW], "source": {"event_time": "sent_ms"}}, "is not the generated"),
        ({"steps": [{"filter": "amount > 10"}]}, "no single window step"),
        ({"steps": [WINDOW], "mode": "active-leader"}, "'window' needs mode 'active'"),
    ],
)
def test_a_window_start_that_cannot_be_placed_is_refused_with_its_reason(
    change: dict[str, Any], says: str
) -> None:
    raw = _raw(resume="window")
    raw["source"]["event_time"] = "ts"
    raw["steps"] = change["steps"]
    raw["source"].update(change.get("source", {}))
    raw["workload"].update(change.get("workload", {}))
    if "mode" in change:
        raw["replication"]["mode"] = change["mode"]
    with pytest.raises(ArflError) as e:
        parse_spec(raw)
    assert "replication.resume" in str(e.value) and says in str(e.value)


def _kills(*at: str) -> list[dict[str, Any]]:
    return [
        {"at": a, "fault": "kill-executor" if k % 2 else "kill-replica", "replica": k % 2}
        for k, a in enumerate(at)
    ]


@pytest.mark.parametrize(
    ("at", "standbys"),
    [
        (("20s",), 1),
        # The used spare's successor is warm 65-75 s later: kills 80 s apart or more need one.
        (("30s", "110s"), 1),
        (("30s", "90s"), 2),
        (("30s", "55s"), 2),
        (("75s", "105s", "130s"), 3),
        (("10s", "20s", "30s", "40s", "50s", "55s"), 4),  # at most replication.standby's 4
        (("30s", "55s", "200s", "210s"), 2),
    ],
)
def test_kills_closer_than_a_standbys_start_get_one_spare_each(
    at: tuple[str, ...], standbys: int
) -> None:
    spec = parse_spec({**_raw(), "chaos": _kills(*at)})
    assert spec.replication.standby == standbys
    [why] = [c.why for c in spec.chosen_defaults if c.key == "replication.standby"]
    assert ("kills within 80 s" in why) == (standbys > 1), why


def test_a_merger_kill_needs_no_spare_driver() -> None:
    chaos = [
        {"at": "30s", "fault": "kill-replica", "replica": 0},
        {"at": "40s", "fault": "kill-merger"},
    ]
    assert parse_spec({**_raw(), "chaos": chaos}).replication.standby == 1


def test_validate_says_when_the_written_standbys_are_too_few_for_the_kills() -> None:
    from arfl.configs.masking import masking_problems

    spec = parse_spec({**_raw(standby=1, trigger_interval="60s"), "chaos": _kills("30s", "55s")})
    [problem] = masking_problems(spec, cores=2)
    assert "replication.standby = 1: 2 kills come within 80 s" in problem
    assert "set replication.standby = 2" in problem
    spaced = parse_spec({**_raw(standby=1, trigger_interval="60s"), "chaos": _kills("30s", "115s")})
    assert masking_problems(spaced, cores=2) == []


def test_a_kill_placed_after_a_boundary_may_fall_an_interval_later() -> None:
    """``after_boundary`` waits for a batch boundary (up to an interval, 60 s here) and then the
    wait: a kill 100 s after one placed so may come 35 s after it."""
    chaos = _kills("30s", "130s")
    assert parse_spec({**_raw(), "chaos": chaos}).replication.standby == 1
    chaos[0]["after_boundary"] = "5s"
    assert parse_spec({**_raw(), "chaos": chaos}).replication.standby == 2
