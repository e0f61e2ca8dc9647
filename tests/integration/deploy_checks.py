"""Checks shared by the deploy tests: a windowed spec, the final output, offline equality."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import StackError
from arfl.measure.check.hops import HopLatency, hop_samples, summarise
from arfl.measure.check.kafka import read_records, replica_topics
from arfl.measure.histogram import merge, percentiles_ms, read_latency_log
from arfl.orchestrate.deploy import DeployResult, scoped
from arfl.replica import offline
from arfl.replica.sparkenv import local_session
from arfl.run.records import Result, final_values, replica_topic, split_update
from arfl.run.rundir import read_jsonl
from arfl.run.state import IsolationState
from arfl.run.streams import MonitorSnapshot
from arfl.stack import StackInfo, ensure_installed
from arfl.stack.lifecycle import layout_of, load_state
from arfl.targets import netns
from arfl.testing.spark import ResultReader


def windowed_spec(
    name: str, mode: str = "none", duration: str = "30s", replicas: int = 1, **extra: Any
) -> Spec:
    """Filter + 1 s tumbling window per user, 200 events/s over 2 partitions."""
    raw: dict[str, Any] = {
        "name": name,
        "source": {"topic": "clicks", "partitions": 2, "event_time": "ts"},
        "steps": [
            {"filter": "amount > 10"},
            {
                "window": {
                    "size": "1s",
                    "key": "user",
                    "watermark": "500ms",
                    "agg": {"n": "count(*)", "total": "sum(amount)"},
                }
            },
        ],
        "sink": {"topic": "clicks-out"},
        "replication": {"mode": mode, "replicas": replicas},
        "spark": {
            "master": "local-cluster[1,1,1024]",
            "conf": {"spark.sql.shuffle.partitions": "2"},
        },
        "workload": {"rate": 200, "duration": duration, "keys": 20, "warmup": "2s"},
    }
    return parse_spec(_merged(raw, extra), f"{name}.toml")


def _merged(raw: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with ``extra``'s sections: a dict merged into the section, anything else set."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return raw


def realtime_spec(
    name: str, duration: str = "15s", interval_s: float | None = 5.0, **extra: Any
) -> Spec:
    """Filter per record, active R=2 on Spark's real-time mode, 300 events/s over 2 partitions
    (one task slot each: ``local-cluster[1,2,1024]``), an interval of ``interval_s`` and no
    standby; ``interval_s = None`` writes neither key, so arfl sets its masking defaults (a
    standby, a 60-s interval for this stateless pipeline: ``configs/masking``). Sections in
    ``extra`` merge in."""
    keys: dict[str, Any] = {}
    if interval_s is not None:
        keys = {"trigger_interval": f"{interval_s:g}s", "standby": 0}
    raw: dict[str, Any] = {
        "name": name,
        "source": {"topic": "clicks", "partitions": 2},
        "steps": [{"filter": "amount > 10"}],
        "sink": {"topic": "clicks-out"},
        "replication": {"mode": "active", "replicas": 2, "trigger": "realtime", **keys},
        "spark": {"master": "local-cluster[1,2,1024]"},
        "workload": {"rate": 300, "duration": duration, "keys": 20, "warmup": "10s"},
    }
    return parse_spec(_merged(raw, extra), f"{name}.toml")


def start_deploy(spec_text: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``arfl deploy`` of ``spec_text`` as a process of its own (a test may kill -9 it): the
    process, the runs root and its log file."""
    import sys

    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text)
    runs, log = tmp_path / "runs", tmp_path / "deploy.log"
    arfl = Path(sys.executable).with_name("arfl")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(arfl), "deploy", str(spec), "--no-live", "--runs", str(runs)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return proc, runs, log


def wait_run_dir(proc: subprocess.Popen[bytes], runs: Path, log: Path) -> Path:
    """The run directory of the deploy ``proc`` once its ``state.json`` exists."""
    found: Path = wait_for(
        "the run directory",
        lambda: next((p.parent for p in runs.glob("*/state.json")), None),
        120,
        proc,
        log,
    )
    return found


def read_topic(
    info: StackInfo, topic: str, at_least: int, *, marker_copies: bool = False
) -> dict[str, list[Result]]:
    """Every result on ``topic`` grouped by result id (waits for ``at_least`` records); marker
    copies are no results, and only a replica's topic (``marker_copies``) may hold any."""
    with ResultReader(info.kafka, topic) as reader:
        reader.poll_until(lambda rs: len(rs) >= at_least, timeout_s=30)
        reader.poll(1.0)
        by_rid: dict[str, list[Result]] = {}
        for r in reader.results:
            by_rid.setdefault(r.result.rid, []).append(r.result)
        assert reader.bad == 0, f"{reader.bad} unreadable records on {topic}"
        assert marker_copies or reader.markers == 0, f"{reader.markers} marker copies on {topic}"
    return by_rid


def final_output(info: StackInfo, result: DeployResult) -> dict[str, list[Result]]:
    """The merged output of a deployment."""
    return read_topic(info, result.summary["topics"]["sink"], result.summary["results"])


def replica_outputs(info: StackInfo, result: DeployResult) -> list[dict[str, list[Result]]]:
    """Each replica's own output topic."""
    sink = result.summary["topics"]["sink"]
    n = result.summary["replicas"]
    return [read_topic(info, replica_topic(sink, i), 1, marker_copies=True) for i in range(n)]


def both_replicas_agree(
    info: StackInfo, result: DeployResult, resumed_ahead: tuple[int, float] | None = None
) -> None:
    """Both replica topics hold the same results, with equal hashes. ``resumed_ahead`` =
    (replica, cut): that replica was killed and resumed ahead of where it had read (a peer's
    checkpoint, a window's start), so its topic may lack updates of records it had not read
    when killed (it can be seconds behind: a first real-time batch that began before the load
    reads little, ``deploy._wait_first_batches``): those are the other's alone, in windows that
    began before ``cut`` (epoch s; 1 s of slack for the event time's skew)."""
    topics = replica_outputs(info, result)
    assert len(topics) == 2
    # A replica never changes its mind either (copies it emitted again after a restart agree).
    for out in topics:
        for rid, copies in out.items():
            assert len({c.hash for c in copies}) == 1, rid
    outs = [{rid: cs[0].hash for rid, cs in o.items()} for o in topics]
    a, b = outs
    differ = [rid for rid in set(a) & set(b) if a[rid] != b[rid]]
    assert not differ, f"replicas disagree on {sorted(differ)[:5]}"
    if resumed_ahead is None:
        only_a, only_b = set(a) - set(b), set(b) - set(a)
        assert not only_a and not only_b, (
            f"results of one replica only: r0 {sorted(only_a)[:3]}, r1 {sorted(only_b)[:3]}"
        )
        return
    killed, cut = resumed_ahead
    mine, other = outs[killed], outs[1 - killed]
    assert set(mine) <= set(other), sorted(set(mine) - set(other))[:3]
    lacking = sorted(set(other) - set(mine))
    print(f"replica {killed}'s topic lacks {len(lacking)} updates of what it had not read")
    assert all(int(rid.split("-", 1)[0]) / 1000 < cut + 1.0 for rid in lacking), lacking[-3:]


_offline_session: contextlib.ExitStack | None = None
_offline_spark: Any = None


def offline_recompute(info: StackInfo, spec: Spec) -> offline.Recomputed:
    """:func:`arfl.replica.offline.recompute` on one in-process batch session per test module
    (closed by ``tests/integration/conftest.py`` after the module) instead of one per call:
    its JVM start cost ~11 s of CPU each time (measured on an idle host)."""
    global _offline_session, _offline_spark
    if _offline_session is None:
        from pyspark.sql import SparkSession

        # Another in-process session would be returned instead (without the Kafka jars).
        assert SparkSession.getActiveSession() is None, "an in-process Spark session is running"
        stack = contextlib.ExitStack()
        jars = ensure_installed().spark_kafka_jars
        conf = {"spark.jars": ",".join(str(j) for j in jars)} if jars else {}
        _offline_spark = stack.enter_context(
            local_session("local[1]", conf, app_name="arfl-test-offline")
        )
        _offline_session = stack
    return offline.recompute_with(_offline_spark, spec, info.kafka)


def close_offline_session() -> None:
    """Stop the module's batch session (and its JVM), if one was started."""
    global _offline_session, _offline_spark
    if _offline_session is not None:
        stack, _offline_session, _offline_spark = _offline_session, None, None
        stack.close()


def check_against_offline(info: StackInfo, spec: Spec, result: DeployResult) -> offline.Recomputed:
    """Final output == offline recomputation: nothing lost, nothing twice, same content."""
    out = final_output(info, result)
    dups = {rid: len(copies) for rid, copies in out.items() if len(copies) > 1}
    assert not dups, f"duplicates in the final output: {list(dups.items())[:5]}"
    expected = offline_recompute(info, scoped(spec, result.run_dir.name))
    if spec.emits_updates:
        _check_final_values(out, expected)
        return expected
    # The injector closes the input with one end-of-input marker per partition.
    assert expected.markers == spec.source.partitions
    if spec.replication.mode != "active-leaderless":
        # Leaderless heartbeats are records of the input topic too (dropped by the pipeline).
        assert expected.input_records == result.summary["produced"] + expected.markers
    # The markers moved the watermark past every window: each one is final.
    assert expected.not_final == frozenset()
    missing = expected.final - set(out)
    if missing:
        sample = {rid: expected.results[rid].data for rid in sorted(missing)[:5]}
        raise AssertionError(
            f"{len(missing)} of {len(expected.final)} final results missing (delivered "
            f"{len(out)}; input {expected.input_records} records, max event time "
            f"{expected.max_event_time_ms}, final watermark {expected.watermark_ms}), e.g. {sample}"
        )
    unexpected = set(out) - set(expected.results)
    assert not unexpected, f"results the input does not explain: {sorted(unexpected)[:5]}"
    wrong = [rid for rid, copies in out.items() if copies[0].hash != expected.results[rid].hash]
    assert not wrong, f"content differs from the offline result for {wrong[:5]}"
    assert len(expected.final) > 0.8 * len(expected.results)
    return expected


def _check_final_values(out: dict[str, list[Result]], expected: offline.Recomputed) -> None:
    """Update-mode output: each window's last update equals the batch job's window result
    (the batch job aggregates the whole window at once, so its rid is ``<window>#<count>``).
    Every intermediate update is judged by the independent check (``check.json``)."""
    finals = final_values(copies[0] for copies in out.values())
    assert expected.not_final == frozenset()
    want = {split_update(rid)[0]: r for rid, r in expected.results.items()}
    assert set(finals) == set(want), (
        f"windows only delivered {sorted(set(finals) - set(want))[:3]}, "
        f"only expected {sorted(set(want) - set(finals))[:3]}"
    )
    wrong = [w for w, r in finals.items() if (r.rid, r.hash) != (want[w].rid, want[w].hash)]
    assert not wrong, f"final values differ from the offline result for {wrong[:5]}"
    # Every update of a window is there: n runs 1..final.
    counts: dict[str, int] = {}
    for rid in out:
        w, n = split_update(rid)
        assert n is not None, f"not an update rid: {rid}"
        counts[w] = counts.get(w, 0) + 1
    short = [w for w, r in finals.items() if counts[w] != split_update(r.rid)[1]]
    assert not short, f"windows with missing updates: {short[:5]}"


def check_run_dir(result: DeployResult) -> None:
    """The run directory has what ``arfl report`` reads, consistent with the summary."""
    run: Path = result.run_dir
    for name in ("spec.json", "state.json", "journal.jsonl", "latency.hlog", "summary.json"):
        assert (run / name).exists(), name
    intervals = read_latency_log(run / "latency.hlog")
    assert sum(i.count for i in intervals) == result.summary["results"]
    lat = result.summary["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"]
    # Minutes late is not healthy. A window appended once it closes (1 s + watermark 0.5 s)
    # cannot be emitted sooner; a per-record result can (p50 457 ms on a
    # leaderless filter pipeline with 500-ms agreed batches, on a fast host).
    assert lat["p50"] <= 60_000
    spec = Spec.model_validate(json.loads((run / "spec.json").read_text()))
    if spec.has_window and not spec.emits_updates:
        assert lat["p50"] >= 500
    events = [e["event"] for e in read_jsonl(run / "journal.jsonl")]
    for ev in ("run-started", "replica-started", "workload-started", "run-finished"):
        assert ev in events
    for i in range(result.summary["replicas"]):
        progress = read_jsonl(run / "progress" / f"replica-{i}.jsonl")
        assert progress and all("durationMs" in p for p in progress)


def latency_against_topics(info: StackInfo, result: DeployResult) -> HopLatency:
    """The merger's latency histogram (``latency.hlog``, every interval) against the same
    results' latency recomputed from the topics' Kafka timestamps (``arfl.measure.check.hops``,
    no code shared with the merger): as many results, and p50 / p99 / max within 2 ms + 0.2 %
    (the merger's clock at the read vs its producer's at the send, whole-ms timestamps,
    HdrHistogram's 3 significant digits), each percentile at HdrHistogram's rank. Returns the
    hops over the whole run.

    HdrHistogram's q-percentile is the value of rank round(q * n) (hdrh: ``int(q * n + 0.5)``),
    the check's nearest rank ceil(q * n): one rank apart when q * n has a fraction below 0.5.
    After an output stall the results come in a burst whose latencies fall by the send interval
    from one to the next: a suite run's p99 was 2,906 ms by nearest rank and 2,898 ms by
    HdrHistogram's (8,087 results, a 3.3-s stall), 8.1 ms apart."""
    state = read_state(result.run_dir)
    assert state is not None
    topics = state["topics"]
    samples = hop_samples(
        read_records(info.kafka, topics["source"]),
        [read_records(info.kafka, t) for t in replica_topics(result.run_dir)],
        read_records(info.kafka, topics["sink"]),
    )
    hops = summarise(samples)
    merger = percentiles_ms(merge(read_latency_log(result.run_dir / "latency.hlog")), (50, 99))
    e2e = hops.hops["e2e"]
    assert merger["count"] == e2e.count == hops.results, (merger, hops)
    ordered = sorted(float(h["e2e"]) for _, h in samples.rows if "e2e" in h)
    at_rank = {
        f"p{round(q * 100)}": ordered[max(1, int(q * len(ordered) + 0.5)) - 1] for q in (0.5, 0.99)
    }
    for key, ours in (*at_rank.items(), ("max", e2e.max)):
        theirs = merger[key]
        assert theirs is not None and abs(ours - theirs) <= 2.0 + 0.002 * theirs, (key, e2e, merger)
    return hops


def journal_events(run: Path, name: str) -> list[dict[str, Any]]:
    """The run's journal entries of one kind, in order."""
    return [e for e in read_jsonl(run / "journal.jsonl") if e["event"] == name]


def received_over_time(run: Path, replica: int) -> list[tuple[float, int]]:
    """``(epoch s, records received so far)`` from one replica, per merger second."""
    snaps = [MonitorSnapshot.from_dict(d) for d in read_jsonl(run / "monitor.jsonl")]
    return [(s.t, s.replicas[replica].received if replica in s.replicas else 0) for s in snaps]


def lag_over_time(run: Path, replica: int) -> list[tuple[float, float]]:
    """``(epoch s, lag ms)`` of one replica per merger second (the merger's ``lag_ms``: wall
    time minus the newest ``src_ts`` it delivered), seconds without a lag left out."""
    snaps = [MonitorSnapshot.from_dict(d) for d in read_jsonl(run / "monitor.jsonl")]
    return [
        (s.t, lag)
        for s in snaps
        if replica in s.replicas and (lag := s.replicas[replica].lag_ms) is not None
    ]


def behind_over_time(run: Path, replica: int) -> list[tuple[float, float]]:
    """``(epoch s, ms behind)`` of one replica per merger second, as caught up judges it
    (``ReplicaSnapshot.behind_ms``: its trail where the merger kept one, else its lag),
    seconds without either left out."""
    snaps = [MonitorSnapshot.from_dict(d) for d in read_jsonl(run / "monitor.jsonl")]
    return [
        (s.t, behind)
        for s in snaps
        if replica in s.replicas and (behind := s.replicas[replica].behind_ms) is not None
    ]


def caught_up_from_topics(
    info: StackInfo,
    result: DeployResult,
    replica: int,
    resumed_at: dict[str, int],
    ticks: list[float],
    healthy: float,
    allowance_ms: float,
    until: float,
) -> float | None:
    """The report's *caught up* (docs/design.md §4) read again without the merger: from the
    replica topics' record timestamps. At a tick t, ``replica`` owes every result some replica
    had written by t that it had not written by t -- except results below the offsets it
    resumed at (``resumed_at``, per input partition: the supervisor's output frontier) that it
    never wrote. Its trail at t is the age of the oldest one (0: none). Returns the first tick
    in ``[healthy, until)`` at which that is within ``allowance_ms``, or None."""
    first: dict[str, float] = {}
    mine: dict[str, float] = {}
    for r in range(result.summary["replicas"]):
        with ResultReader(info.kafka, replica_topic(result.summary["topics"]["sink"], r)) as rd:
            assert rd.drain(), f"could not read replica {r}'s topic to its end"
            for rr in rd.results:
                t = rr.kafka_ts_ms / 1000.0
                first[rr.result.rid] = min(first.get(rr.result.rid, math.inf), t)
                if r == replica:
                    mine[rr.result.rid] = min(mine.get(rr.result.rid, math.inf), t)

    def skipped(rid: str) -> bool:
        p, _, o = rid.partition(":")
        return rid not in mine and o.isdigit() and int(o) < resumed_at.get(p, -1)

    owed = sorted((t, rid) for rid, t in first.items() if not skipped(rid))
    for tick in ticks:
        if not healthy <= tick < until:
            continue
        oldest = next((t for t, rid in owed if t <= tick and mine.get(rid, math.inf) > tick), None)
        if (0.0 if oldest is None else (tick - oldest) * 1000.0) <= allowance_ms:
            return tick
    return None


def check_silent_then_resumed(run: Path, replica: int, start: float, end: float) -> None:
    """The replica delivered no result of an input sent after ``start`` until ``end``, and
    after ``end`` results of inputs sent after ``end``.

    ``start``: when the fault's injection ended (journal ``fault-injected.ended``); ``end``: when
    its revert began (``fault-reverted.started``) — not when the revert call returned: the
    replica may deliver before the injector's own thread gets the CPU to stamp the end (CI: a
    container's output 182 records up in the merger second before an unpause was stamped).
    Judged by the newest ``src_ts`` (an input's intended send time, never after its actual one)
    and not by the count: a result the replica sent just before the stop can reach the merger
    seconds later (CI: one result 3-4 s into a 5-s pause)."""
    snaps = [MonitorSnapshot.from_dict(d) for d in read_jsonl(run / "monitor.jsonl")]
    mine = [(s.t, s.replicas[replica]) for s in snaps if replica in s.replicas]
    during = [r for t, r in mine if start + 1 <= t <= end]
    assert during, f"no monitor line from {start + 1:.1f} to {end:.1f}"
    newest = max((r.last_src_ts or 0) for r in during)
    assert newest <= start * 1000 + 1, (
        f"a result of an input sent {newest / 1000 - start:.3f}s after the fault took hold: "
        f"{[(r.received, r.last_src_ts) for r in during]}"
    )
    after = [r for t, r in mine if t > end]
    assert after and after[-1].received > max(r.received for r in during), (
        "no output after the fault was reverted"
    )
    assert (after[-1].last_src_ts or 0) > end * 1000, "no result of an input sent after the revert"


def batch_drops(run: Path, replica: int) -> dict[str, int]:
    """Rows a replica's batches dropped behind the watermark, by batch end offset (JSON)."""
    import json

    out: dict[str, int] = {}
    for line in read_jsonl(run / "progress" / f"replica-{replica}.jsonl"):
        rows = sum(
            int(op.get("numRowsDroppedByWatermark") or 0) for op in line.get("stateOperators") or []
        )
        if rows:
            end = json.dumps(line["sources"][0]["endOffset"], sort_keys=True)
            out[end] = rows
    return out


def read_state(run_dir: Path) -> dict[str, Any] | None:
    """A run's ``state.json`` as written so far (None before deploy wrote it, or mid-write)."""
    import json

    try:
        data = json.loads((run_dir / "state.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def wait_for(
    what: str, check: Any, timeout_s: float, proc: subprocess.Popen[bytes], log: Path
) -> Any:
    """``check()``'s first true value, polled while the ``arfl deploy`` process ``proc`` runs;
    its log's tail in the error when it exits first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(f"arfl deploy exited ({proc.returncode}) before {what}:\n"
                                 + log.read_text(errors="replace")[-3000:])  # fmt: skip
        time.sleep(0.5)
    raise AssertionError(f"{what} not reached in {timeout_s:.0f}s:\n"
                         + log.read_text(errors="replace")[-3000:])  # fmt: skip


def kill_deploy_while_its_stack_starts(
    spec_text: str, tmp_path: Path
) -> tuple[Path, Path, list[Any]]:
    """``arfl deploy`` of a spec that gets a ZooKeeper + Kafka of the run's own (network faults,
    the docker target), ``kill -9``-ed once that Kafka's process exists but before the stack
    answered: the run's namespaces or docker network and its own stack are all that exist.
    Returns the runs root, the run directory and the stack's process records."""
    proc, runs, log = start_deploy(spec_text, tmp_path)
    try:

        def kafka_spawned() -> tuple[Path, list[Any]] | None:
            for run_dir in runs.glob("*"):
                try:
                    st = load_state(layout_of(run_dir / "stack"))
                except StackError:
                    continue  # mid-write
                if st is not None and "kafka" in st.services:
                    return run_dir, list(st.services.values())
            return None

        deadline = time.monotonic() + 120
        found = kafka_spawned()
        while found is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            found = kafka_spawned()
        if found is None:
            raise AssertionError("the run's own Kafka never started:\n" + log.read_text()[-3000:])
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    run_dir, records = found
    # What makes this the early window: the stack had not answered when arfl died.
    assert not journal_events(run_dir, "run-stack-started"), "killed too late"
    return runs, run_dir, records


def forward_rules(bridge: str) -> list[str]:
    """iptables FORWARD rules arfl added for ``bridge``."""
    if shutil.which("iptables") is None:
        return []
    out = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if f"arfl:{bridge}" in line]


def left_behind(iso: IsolationState) -> list[str]:
    """What of ``iso`` still exists: links, namespaces, the bridge's FORWARD rule."""
    links = {iso.bridge} | {ns.veth_host or "" for ns in iso.namespaces.values()}
    names = {ns.name for ns in iso.namespaces.values()}
    present = netns._link_names()
    return sorted(
        (links & present) | (names & set(netns.list_namespaces())) | set(forward_rules(iso.bridge))
    )


def arfl_ok(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``arfl <args>`` as a process of its own; asserts it exited 0 (its output otherwise)."""
    import sys

    arfl = Path(sys.executable).with_name("arfl")
    r = subprocess.run([str(arfl), *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""One scrape: (sample name, labels) -> value."""


class MetricsScraper:
    """Scrapes a metrics endpoint every ``every_s`` in a thread while a deployment runs (a
    context manager); :attr:`scrapes` holds each answer, in order (none while the endpoint
    does not answer: before the deployment serves it and after)."""

    def __init__(self, url: str, every_s: float = 0.5) -> None:
        self.url = url
        self.every_s = every_s
        self.scrapes: list[Samples] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as resp:
                    text = resp.read().decode()
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                continue
            self.scrapes.append(
                {
                    (s.name, frozenset(s.labels.items())): s.value
                    for family in text_string_to_metric_families(text)
                    for s in family.samples
                }
            )

    def values(self, name: str, **labels: str) -> list[float]:
        """The sample's value in every scrape that has it, in order."""
        key = (name, frozenset(labels.items()))
        return [s[key] for s in self.scrapes if key in s]

    def __enter__(self) -> MetricsScraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
