"""The merger's memory over a long run: RSS and dedup entries at a steady rate, two replicas.

    .venv/bin/python bench/merger_memory.py [--rate 2500] [--seconds 300] [--out F] [--keep]

Starts an embedded ZooKeeper + Kafka on loopback (in a fresh directory under /tmp), creates the
two replica topics and the sink topic (4 partitions each), and runs the real merger process
(``python -m arfl.measure.merger --config FILE``, R=2). This script stands in for the replicas:
``--rate`` per-record results a second on a fixed schedule for ``--seconds``, result n being
input partition ``n % 4``, offset ``n // 4`` (rid ``"<p>:<o>"``, Kafka key = rid, the value as
in :mod:`arfl.run.records`; ``src_ts`` the intended time, ``sent_ts`` the actual one, the
hash SHA-256 of the rid, the same in both copies). Every result goes to both replica topics,
replica 1's copy ``--lag`` seconds after replica 0's, each replica with its own idempotent
producer (linger 5 ms) and the partition its producer's partitioner picks from the key (murmur2,
as the Java producers of Spark replicas; no partition is given).

Once a second it samples the merger's RSS (psutil) and reads its ``monitor.jsonl``. It reports
the RSS at 30 % and 90 % of the run (minutes 1.5 and 4.5 at the defaults), its min and max in
between and their ratio, ``dedup_entries`` and the counters at a few points, and finally reads
the sink topic back in full: its records, distinct rids (must equal the results produced) and
duplicates (must be 0). The dedup memory is bounded (docs/design.md, "Bounded dedup"): about
``RECENT_S`` (60 s) of ids, so the RSS should stop growing after the first minute.

Exit code 1 when the sink is incomplete or has duplicates, or the merger failed; an RSS that
grows is reported (``rss_growth_ok``), not failed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from _common import Column, cpu_lock, print_table, write_rows
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from arfl.measure.merger.config import MergerConfig
from arfl.measure.merger.core import RECENT_S
from arfl.processes import wait_until
from arfl.run.records import replica_topic
from arfl.run.rundir import read_jsonl
from arfl.run.streams import JsonlTail
from arfl.stack.embedded import EmbeddedStack
from arfl.stack.topics import ensure_topic

PARTITIONS = 4
"""Input partitions of the simulated pipeline, and partitions of every topic."""
REPLICAS = 2
LEAD_S = 5.0
"""Production starts this long after the merger is launched (its ``input_start``)."""
IDLE_S = 5.0
"""The merger stops this long after its last record, once the planned input ended."""
GROWTH_LIMIT = 1.15
"""An RSS ratio (late / early) above this is growth worth explaining."""
MIB = 1024 * 1024
HOST_BUSY = ("user", "nice", "system", "irq", "softirq")


@dataclass
class Produced:
    """What the simulated replicas wrote."""

    results: int = 0
    """Results generated (each written once per replica)."""
    delivered: list[int] = field(default_factory=lambda: [0] * REPLICAS)
    failed: list[int] = field(default_factory=lambda: [0] * REPLICAS)
    first_error: str | None = None
    end: float | None = None
    """When the last copy was handed to its producer (epoch s)."""
    behind_s: float = 0.0
    """The most the schedule was behind (a producer that cannot keep up)."""

    def callback(self, replica: int) -> Any:
        """A delivery callback that counts ``replica``'s outcomes."""

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is None:
                self.delivered[replica] += 1
            else:
                self.failed[replica] += 1
                if self.first_error is None:
                    self.first_error = str(err)

        return on_delivery


class RssSampler:
    """The merger's RSS and CPU seconds once a second, in a thread, until it exits."""

    def __init__(self, pid: int, interval_s: float = 1.0) -> None:
        self.proc = psutil.Process(pid)
        self.interval_s = interval_s
        self.samples: list[tuple[float, int, float]] = []
        """``(epoch s, RSS bytes, CPU s)``."""
        self.host: list[float] = []
        """The whole machine's busy CPU seconds (anyone's), at the same times."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="merger-rss", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def latest_mib(self) -> float | None:
        return self.samples[-1][1] / MIB if self.samples else None

    def _loop(self) -> None:
        while True:
            try:
                with self.proc.oneshot():
                    rss = self.proc.memory_info().rss
                    t = self.proc.cpu_times()
                self.samples.append((time.time(), rss, t.user + t.system))
                h = psutil.cpu_times()
                self.host.append(sum(getattr(h, f, 0.0) for f in HOST_BUSY))
            except psutil.Error:
                return  # it exited
            if self._stop.wait(self.interval_s):
                return


def rid_of(n: int) -> str:
    """The id of result ``n``: input partition ``n % 4``, offset ``n // 4``."""
    return f"{n % PARTITIONS}:{n // PARTITIONS}"


def result_value(rid: str, offset: int, src_ms: int, sent_ms: int, replica: int, h: str) -> bytes:
    """A replica's output record (:mod:`arfl.run.records`)."""
    return json.dumps(
        {
            "rid": rid,
            "src_ts": src_ms,
            "sent_ts": sent_ms,
            "replica": replica,
            "hash": h,
            "data": {"o": offset},
        },
        separators=(",", ":"),
    ).encode()


def _produce(prod: Producer, topic: str, key: bytes, value: bytes, cb: Any) -> None:
    while True:
        try:
            prod.produce(topic, key=key, value=value, on_delivery=cb)
            return
        except BufferError:
            prod.poll(0.005)


def replica_producer(bootstrap: str, replica: int) -> Producer:
    """A replica's sink producer: idempotent (keeps each partition's order, as the merger's
    channels assume), linger 5 ms, murmur2 on the key like Spark's Java producer."""
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": f"bench-replica-{replica}",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 1_000_000,
        }
    )


def produce_results(
    bootstrap: str,
    sink: str,
    rate: float,
    seconds: float,
    t0: float,
    lag_s: float,
    out: Produced,
    progress: Any,
    hold: tuple[float, float] | None = None,
    replicas: tuple[int, ...] = (0, 1),
) -> None:
    """Write ``rate`` results a second from ``t0`` for ``seconds`` to the replica topics,
    replica 1's copies ``lag_s`` behind replica 0's; ``progress(now)`` is called every loop.
    ``hold = (start, end)`` (epoch s): replica 0's copies due in between are held and written
    at ``end`` all at once, as a paused replica's backlog goes out when it resumes.
    ``replicas``: whose copies this process writes (a process a replica: one's burst does not
    hold up the other's copies)."""
    prods = {r: replica_producer(bootstrap, r) for r in replicas}
    topics = [replica_topic(sink, r) for r in range(REPLICAS)]
    cbs = [out.callback(r) for r in range(REPLICAS)]
    total = round(rate * seconds)
    pending: collections.deque[tuple[float, bytes, bytes]] = collections.deque()
    held: list[tuple[bytes, bytes]] = []
    try:
        while time.time() < t0:
            time.sleep(min(0.05, max(0.0, t0 - time.time())))
        n = 0
        while n < total or pending or held:
            now = time.time()
            due = min(total, int((now - t0) * rate) + 1)
            if n < due:
                out.behind_s = max(out.behind_s, now - (t0 + n / rate))
            sent_ms = int(now * 1000)
            while n < due:
                rid = rid_of(n)
                key = rid.encode()
                h = hashlib.sha256(key).hexdigest()
                src_ms = int((t0 + n / rate) * 1000)
                offset = n // PARTITIONS
                if 0 in replicas:
                    v0 = result_value(rid, offset, src_ms, sent_ms, 0, h)
                    if hold is not None and hold[0] <= now < hold[1]:
                        held.append((key, v0))
                    else:
                        _produce(prods[0], topics[0], key, v0, cbs[0])
                if 1 in replicas:
                    v1 = result_value(rid, offset, src_ms, sent_ms, 1, h)
                    pending.append((now + lag_s, key, v1))
                n += 1
            out.results = n
            if held and (hold is None or now >= hold[1]):
                for key, value in held:
                    _produce(prods[0], topics[0], key, value, cbs[0])
                held.clear()
            while pending and pending[0][0] <= now:
                _, key, value = pending.popleft()
                _produce(prods[1], topics[1], key, value, cbs[1])
            for p in prods.values():
                p.poll(0)
            progress(now)
            time.sleep(0.002)
        out.end = time.time()
    finally:
        for p in prods.values():
            p.flush(30)


def read_sink(bootstrap: str, topic: str, timeout_s: float = 300.0) -> tuple[int, set[str]]:
    """Every record of ``topic`` up to its current end: (records, distinct keys)."""
    from arfl.errors import DeployError
    from arfl.stack.topics import read_to_end

    msgs = read_to_end(
        bootstrap,
        topic,
        error=DeployError,
        missing_hint="the bench creates it",
        unreachable_hint="the bench's stack is down",
        timeout_s=timeout_s,
        group_prefix="bench-merger-memory",
    )
    return len(msgs), {(m.key() or b"").decode() for m in msgs}


def source_version() -> dict[str, Any]:
    """The checkout's commit, and whether the merger's sources differ from it."""
    root = Path(__file__).resolve().parent.parent

    def git(*a: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *a], cwd=root, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    changed = git("status", "--porcelain", "src/arfl/measure", "src/arfl/run")
    return {"commit": git("rev-parse", "HEAD"), "merger_sources_changed": bool(changed)}


def warm_group_coordinator(bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
    """Wait until the broker answers a committed-offsets request.

    On a fresh broker the first one creates the offsets topic and fails with NOT_COORDINATOR
    meanwhile; the merger asks for its committed positions once at start (to take over from a
    merger before it), so it is asked here first.
    """
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-merger-memory-warm-up",
            "enable.auto.commit": False,
        }
    )

    def answers() -> bool:
        try:
            c.committed([TopicPartition(topic, 0)], timeout=5.0)
        except KafkaException:
            return False
        return True

    try:
        wait_until(answers, timeout_s=timeout_s, interval_s=0.5, what="the group coordinator")
    finally:
        c.close()


def merger_log_tail(work: Path, lines: int = 8) -> str:
    """The last lines of the merger's output, for an error message."""
    try:
        text = (work / "merger.log").read_text(errors="replace")
    except OSError:
        return "(no merger.log)"
    return " | ".join(text.strip().splitlines()[-lines:])


def stop_merger(proc: subprocess.Popen[bytes], wait_s: float) -> None:
    """Wait up to ``wait_s`` for the merger to end by itself; then SIGTERM it, then kill it."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(wait_s)
        return
    proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(40)
        return
    proc.kill()
    proc.wait(10)


def nearest(samples: list[tuple[float, Any]], t: float) -> tuple[float, Any] | None:
    """The sample whose time is nearest ``t``."""
    return min(samples, key=lambda s: abs(s[0] - t)) if samples else None


def analyse(
    args: argparse.Namespace,
    t0: float,
    sampler: RssSampler,
    monitor: list[dict[str, Any]],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The summary figures and the per-point rows of the table."""
    rss = [(t - t0, b / MIB) for t, b, _ in sampler.samples]
    cpu = [(t - t0, c) for t, _, c in sampler.samples]
    lines = [(float(ln["t"]) - t0, ln) for ln in monitor]
    early, late = args.early * args.seconds, args.late * args.seconds
    e, la = nearest(rss, early), nearest(rss, late)
    lo = early if e is None else min(early, e[0])
    hi = late if la is None else max(late, la[0])
    between = [m for s, m in rss if lo <= s <= hi]
    summary: dict[str, Any] = {
        "early_s": early,
        "late_s": late,
        "rss_early_mib": None if e is None else round(e[1], 1),
        "rss_late_mib": None if la is None else round(la[1], 1),
        "rss_min_between_mib": round(min(between), 1) if between else None,
        "rss_max_between_mib": round(max(between), 1) if between else None,
        "rss_peak_mib": round(max(m for _, m in rss), 1) if rss else None,
    }
    if e is not None and la is not None:
        summary["rss_ratio"] = round(la[1] / e[1], 3)
        summary["rss_growth_ok"] = la[1] / e[1] <= GROWTH_LIMIT
    if early < RECENT_S + 10:
        summary["note"] = (
            f"the early point ({early:.0f} s) is within the first {RECENT_S:.0f} s the dedup "
            "memory fills for: growth up to then is expected"
        )
    steady = [(s, c) for s, c in cpu if 0 <= s <= args.seconds]
    if len(steady) >= 2 and steady[-1][0] > steady[0][0]:
        (s0, c0), (s1, c1) = steady[0], steady[-1]
        summary["merger_cores"] = round((c1 - c0) / (s1 - s0), 3)
        i0, i1 = cpu.index((s0, c0)), cpu.index((s1, c1))
        host = sampler.host
        summary["host_busy_cores"] = round((host[i1] - host[i0]) / (s1 - s0), 3)
    entries = [ln.get("dedup_entries") for s, ln in lines if 0 <= s <= args.seconds]
    ints = [x for x in entries if isinstance(x, int)]
    summary["dedup_entries_max"] = max(ints) if ints else None
    points = sorted(
        {round(f * args.seconds, 1) for f in (1 / 30, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 0.9, 1.0)}
    )
    rows: list[dict[str, Any]] = []
    for s in points:
        r = nearest(rss, s)
        ln = nearest(lines, s)
        row: dict[str, Any] = {"t_s": s, "rss_mib": None if r is None else round(r[1], 1)}
        if ln is not None:
            m = ln[1]
            for k in ("dedup_entries", "dedup_floors", "results", "duplicates_total"):
                row[k] = m.get(k)
            row["uncompared"] = m.get("uncompared")
            row["trail_ms_1"] = (m.get("replicas") or {}).get("1", {}).get("trail_ms")
        rows.append(row)
    return summary, rows


def _shown(row: dict[str, Any], key: str) -> Any:
    """A table cell: the value, or ``-`` when there is none."""
    v = row.get(key)
    return "-" if v is None else v


def _interrupted(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rate", type=float, default=2500.0, help="results a second")
    p.add_argument("--seconds", type=float, default=300.0, help="how long results are produced")
    p.add_argument("--lag", type=float, default=0.5, help="replica 1 behind replica 0, s")
    p.add_argument("--early", type=float, default=0.3, help="early RSS point, share of the run")
    p.add_argument("--late", type=float, default=0.9, help="late RSS point, share of the run")
    p.add_argument("--workdir", type=Path, help="default: a new directory under /tmp")
    p.add_argument("--keep", action="store_true", help="keep the stack's data afterwards")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    # Ctrl-C and a plain kill both end in the cleanup below (merger and stack stopped by pid),
    # also when started in the background, where SIGINT is inherited as ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupted)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="arfl-merger-memory-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    run_dir = work / "run"
    harness = EmbeddedStack(work / "stack")
    merger: subprocess.Popen[bytes] | None = None
    sampler: RssSampler | None = None
    with cpu_lock():
        try:
            print(f"starting the embedded stack in {work / 'stack'}", file=sys.stderr, flush=True)
            info = harness.start()
            sink = "bench-merger-memory"
            for t in (sink, *(replica_topic(sink, r) for r in range(REPLICAS))):
                ensure_topic(info.kafka, t, PARTITIONS)
            warm_group_coordinator(info.kafka, sink)
            version = source_version()
            launched = time.time()
            t0 = launched + LEAD_S
            cfg = MergerConfig(
                bootstrap=info.kafka,
                sink=sink,
                replicas=REPLICAS,
                run_dir=run_dir,
                input_start=t0,
                input_end=t0 + args.seconds,
                until=t0 + args.seconds + 120.0,
                idle_s=IDLE_S,
            )
            log = open(work / "merger.log", "wb")  # noqa: SIM115 - closed with the process
            merger = subprocess.Popen(
                cfg.command(work / "merger.config.json"),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )
            log.close()
            sampler = RssSampler(merger.pid)
            sampler.start()
            produced = Produced()
            tail = JsonlTail(run_dir / "monitor.jsonl")
            last_line: dict[str, Any] = {}
            next_report = t0 + 30.0

            next_check = t0

            def progress(now: float) -> None:
                nonlocal next_report, next_check, last_line
                if now >= next_check:
                    next_check = now + 1.0
                    if merger is not None and merger.poll() is not None:
                        raise RuntimeError(
                            f"the merger exited ({merger.returncode}): {merger_log_tail(work)}"
                        )
                if now < next_report:
                    return
                next_report += 30.0
                new = tail.read_new()
                if new:
                    last_line = new[-1]
                rss = sampler.latest_mib() if sampler else None
                print(
                    f"{now - t0:6.0f} s  results {produced.results:>9,}  merger RSS "
                    f"{rss or 0:7.1f} MiB  dedup_entries {last_line.get('dedup_entries')}  "
                    f"merged {last_line.get('results')}",
                    file=sys.stderr,
                    flush=True,
                )

            print(
                f"producing {args.rate:,.0f} results/s for {args.seconds:.0f} s to "
                f"{REPLICAS} replica topics",
                file=sys.stderr,
                flush=True,
            )
            produce_results(
                info.kafka, sink, args.rate, args.seconds, t0, args.lag, produced, progress
            )
            stop_merger(merger, IDLE_S + 60.0)
            sampler.stop()
            try:
                final = json.loads((run_dir / "merger.json").read_text())
            except OSError:
                raise RuntimeError(
                    f"the merger wrote no merger.json: {merger_log_tail(work)}"
                ) from None
            monitor = read_jsonl(run_dir / "monitor.jsonl")
            count, keys = read_sink(info.kafka, sink)
            expected = {rid_of(n) for n in range(produced.results)}
            summary, rows = analyse(args, t0, sampler, monitor)
            summary.update(
                {
                    "rate": args.rate,
                    "seconds": args.seconds,
                    "lag_s": args.lag,
                    "partitions": PARTITIONS,
                    "replicas": REPLICAS,
                    "produced_results": produced.results,
                    "delivered": produced.delivered,
                    "delivery_failures": produced.failed,
                    "producer_behind_max_s": round(produced.behind_s, 3),
                    "production_s": None if produced.end is None else round(produced.end - t0, 1),
                    "merger_exit": merger.returncode,
                    "merger": {
                        k: final.get(k)
                        for k in (
                            "results",
                            "received",
                            "duplicates",
                            "divergent",
                            "bad",
                            "uncompared",
                            "delivery_failures",
                            "stop_reason",
                            "latency_ms",
                        )
                    },
                    "sink_records": count,
                    "sink_distinct": len(keys),
                    "sink_duplicates": count - len(keys),
                    "sink_missing": len(expected - keys),
                    "sink_unexpected": len(keys - expected),
                    "points": rows,
                    "rss_samples": [
                        [round(t - t0, 1), round(b / MIB, 1)] for t, b, _ in sampler.samples
                    ],
                    "run_dir": str(run_dir),
                    **version,
                }
            )
        finally:
            if sampler is not None:
                sampler.stop()
            if merger is not None and merger.poll() is None:
                merger.send_signal(signal.SIGTERM)
                try:
                    merger.wait(40)
                except subprocess.TimeoutExpired:
                    merger.kill()
                    merger.wait(10)
            harness.stop()
            if not args.keep:
                shutil.rmtree(work / "stack", ignore_errors=True)
    print_table(
        rows,
        Column("t s", 6, ".0f", lambda r: r["t_s"]),
        [
            Column("RSS MiB", 8, "", lambda r: _shown(r, "rss_mib")),
            Column("dedup_entries", 13, "", lambda r: _shown(r, "dedup_entries")),
            Column("floors", 6, "", lambda r: _shown(r, "dedup_floors")),
            Column("results", 9, "", lambda r: _shown(r, "results")),
            Column("dup_total", 9, "", lambda r: _shown(r, "duplicates_total")),
            Column("uncompared", 10, "", lambda r: _shown(r, "uncompared")),
            Column("r1 trail ms", 11, "", lambda r: _shown(r, "trail_ms_1")),
        ],
    )
    s = summary
    print()
    print(
        f"RSS at {s['early_s']:.0f} s {s['rss_early_mib']} MiB, at {s['late_s']:.0f} s "
        f"{s['rss_late_mib']} MiB: ratio {s.get('rss_ratio')} (min {s['rss_min_between_mib']}, "
        f"max {s['rss_max_between_mib']} between; peak {s['rss_peak_mib']})"
    )
    print(
        f"produced {s['produced_results']:,} results x {REPLICAS} replicas "
        f"(delivered {s['delivered']}, failed {s['delivery_failures']}, schedule behind at "
        f"most {s['producer_behind_max_s']} s); merger {s['merger']}"
    )
    print(
        f"sink: {s['sink_records']:,} records, {s['sink_distinct']:,} distinct rids, "
        f"{s['sink_duplicates']} duplicates, {s['sink_missing']} missing; "
        f"merger {s.get('merger_cores')} cores, host {s.get('host_busy_cores')} cores busy; "
        f"run dir {run_dir}"
    )
    if "note" in s:
        print(f"note: {s['note']}")
    write_rows(args.out, [summary])
    ok = (
        s["sink_duplicates"] == 0
        and s["sink_missing"] == 0
        and s["sink_unexpected"] == 0
        and s["merger_exit"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
