"""Latency hop by hop, from the Kafka timestamps of a run's topics (no code shared with the
merger's measurement).

Every hop of a run writes a Kafka record: the injector the input record, each replica's Kafka
sink its copy, the merger the delivered copy. The input topic and the replicas' topics use
``LogAppendTime`` (the broker's clock at the append: a copy counts from when the merger could
read it, after its replica's producer batched it for ``linger.ms``); the final topic uses
``CreateTime`` (the merger's clock at its send). Joining them by result id (``partition:offset``
of the input record, per-record pipelines only) gives, for every result delivered at or after
``from_ms`` (the report's phases select by delivery too):

* ``late``: the injector's send time (the event's ``sent_ms``) minus its intended time
  (``src_ts``): the injector behind its schedule;
* ``append``: the input record's broker timestamp minus ``sent_ms``: the injector's producer and
  the broker's append (only when the input topic uses ``LogAppendTime``);
* ``replica <i>``: replica i's copy's timestamp minus the input record's: the broker to Spark,
  the pipeline, the sink's producer (its linger included when the replica's topic uses
  ``LogAppendTime``; a topic made with ``CreateTime`` stamps the copy at the send, before the
  linger, which then counts in ``merge``). A replica's own stalls (a real-time batch boundary,
  a restart) show here and, while another replica delivers, nowhere else;
* ``merge``: the delivered copy's send minus the earliest replica copy's timestamp: the
  merger's fetch and its work (and the broker's append, with ``CreateTime`` replica topics);
* ``e2e``: the delivered copy's send minus ``src_ts``: what the merger's HdrHistogram records
  (arrival minus intended time), to the millisecond, from the other side.

Timestamps are whole milliseconds from three clocks of one host. Percentiles are nearest-rank.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arfl.measure.check.evaluate import InputRecord

QUANTILES = {"p50": 0.50, "p99": 0.99}


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The q-quantile (0 < q <= 1) of the sorted, non-empty ``ordered``: its ceil(q*n)-th value."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class HopStats:
    """One hop's latency over the results (ms)."""

    count: int
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> HopStats:
        """Nearest-rank p50/p99 and the maximum of ``values`` (not empty)."""
        s = sorted(values)
        return cls(len(s), nearest_rank(s, QUANTILES["p50"]), nearest_rank(s, QUANTILES["p99"]),
                   s[-1])  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """``{count, p50, p99, max}``."""
        return {"count": self.count, "p50": self.p50, "p99": self.p99, "max": self.max}


@dataclass(frozen=True)
class HopLatency:
    """The hops of a run (module docstring); ``unsupported`` says why there are none.

    Attributes:
        from_ms: results delivered before this (the warm-up) are left out.
        results: delivered results joined with their input record.
        input_timestamps: the input topic's timestamp type (``LogAppendTime``/``CreateTime``).
        replica_timestamps: the replicas' topics' (``LogAppendTime`` when every copy has the
            broker's timestamp; else ``CreateTime``, the replicas' linger counted in ``merge``).
        hops: hop name -> its latency, in the order of the module docstring.
        unsupported: why no hop could be measured (window updates have no input record).
    """

    from_ms: int | None = None
    results: int = 0
    input_timestamps: str = "LogAppendTime"
    hops: dict[str, HopStats] = field(default_factory=dict)
    unsupported: str | None = None
    replica_timestamps: str = "CreateTime"

    def to_dict(self) -> dict[str, Any]:
        """The ``hops`` object of ``check.json``."""
        return {
            "from_ms": self.from_ms,
            "results": self.results,
            "input_timestamps": self.input_timestamps,
            "replica_timestamps": self.replica_timestamps,
            "hops": {k: v.to_dict() for k, v in self.hops.items()},
            "unsupported": self.unsupported,
        }

    @classmethod
    def from_dict(cls, doc: Any) -> HopLatency | None:
        """Read ``check.json``'s ``hops``; None when absent or malformed."""
        if not isinstance(doc, dict):
            return None
        try:
            hops = {
                str(k): HopStats(int(v["count"]), float(v["p50"]), float(v["p99"]), float(v["max"]))
                for k, v in dict(doc.get("hops") or {}).items()
            }
            from_ms = doc.get("from_ms")
            return cls(
                from_ms=None if from_ms is None else int(from_ms),
                results=int(doc.get("results", 0)),
                input_timestamps=str(doc.get("input_timestamps", "LogAppendTime")),
                hops=hops,
                unsupported=None if doc.get("unsupported") is None else str(doc["unsupported"]),
                replica_timestamps=str(doc.get("replica_timestamps", "CreateTime")),
            )
        except (KeyError, TypeError, ValueError):
            return None


def _result(value: bytes | None) -> tuple[str, int] | None:
    """``(rid, src_ts)`` of a replica's or the merger's record; None when it is not one."""
    try:
        obj = json.loads(value or b"")
        return str(obj["rid"]), int(obj["src_ts"])
    except (ValueError, KeyError, TypeError):
        return None


def _sent_ms(value: bytes | None) -> int | None:
    try:
        v = json.loads(value or b"").get("sent_ms")
    except (ValueError, AttributeError):
        return None
    return v if isinstance(v, int) else None


@dataclass(frozen=True)
class HopSamples:
    """Every joined result's hops (the per-record values :func:`hop_latency` summarises).

    Attributes:
        input_timestamps: the input topic's timestamp type.
        replica_timestamps: the replicas' topics' (:class:`HopLatency`).
        names: the hops measured, in the order of the module docstring.
        rows: per joined result, its ``src_ts`` and hop -> ms (a hop missing when its
            timestamps are: no ``sent_ms``, no copy from that replica).
        matched: delivered results that name an input record (warm-up included).
        delivered: distinct result ids delivered.
    """

    input_timestamps: str
    names: list[str]
    rows: list[tuple[int, dict[str, int]]]
    matched: int
    delivered: int
    replica_timestamps: str = "CreateTime"


def hop_samples(
    inputs: Sequence[InputRecord],
    replicas: Sequence[Sequence[InputRecord]],
    output: Sequence[InputRecord],
    *,
    from_ms: int | None = None,
) -> HopSamples:
    """Each delivered result's hops (module docstring).

    Args:
        inputs: the input topic's records.
        replicas: each replica topic's records, replica 0 first.
        output: the final output topic's records (the first copy of a result id counts).
        from_ms: leave out results delivered (by the merger's clock) before this.

    ``append`` is measured only when every input record carries the broker's timestamp.
    """
    input_log_append = bool(inputs) and all(r.log_append_time for r in inputs)
    by_pos = {f"{r.partition}:{r.offset}": r for r in inputs}
    broker = any(replicas) and all(r.log_append_time for recs in replicas for r in recs)
    replica_kind = "LogAppendTime" if broker else "CreateTime"
    sends: list[dict[str, int]] = []
    for recs in replicas:
        first: dict[str, int] = {}
        for r in recs:
            res = _result(r.value)
            if res is not None and r.timestamp_ms is not None:
                first.setdefault(res[0], r.timestamp_ms)
        sends.append(first)
    names = ["late", *(["append"] if input_log_append else [])]
    names += [f"replica {i}" for i in range(len(replicas))] + ["merge", "e2e"]
    rows: list[tuple[int, dict[str, int]]] = []
    seen: set[str] = set()
    matched = 0
    for r in output:
        res = _result(r.value)
        if res is None or r.timestamp_ms is None or res[0] in seen:
            continue
        rid, src_ts = res
        seen.add(rid)
        inp = by_pos.get(rid)
        if inp is None or inp.timestamp_ms is None:
            continue
        matched += 1
        if from_ms is not None and r.timestamp_ms < from_ms:
            continue
        hops: dict[str, int] = {}
        sent = _sent_ms(inp.value)
        if sent is not None:
            hops["late"] = sent - src_ts
            if input_log_append:
                hops["append"] = inp.timestamp_ms - sent
        copies = [s[rid] for s in sends if rid in s]
        for i, s in enumerate(sends):
            if rid in s:
                hops[f"replica {i}"] = s[rid] - inp.timestamp_ms
        if copies:
            hops["merge"] = r.timestamp_ms - min(copies)
        hops["e2e"] = r.timestamp_ms - src_ts
        rows.append((src_ts, hops))
    kind = "LogAppendTime" if input_log_append else "CreateTime"
    return HopSamples(kind, names, rows, matched, len(seen), replica_kind)


def summarise(samples: HopSamples, from_ms: int | None = None) -> HopLatency:
    """Nearest-rank p50/p99 and max of every hop of ``samples``; when none, why."""
    if not samples.rows:
        if samples.matched:
            why = "every result was delivered before the end of the warm-up"
        elif samples.delivered:
            why = "no delivered result names an input record (window updates are not per record)"
        else:
            why = "no delivered result"
        return HopLatency(from_ms, 0, samples.input_timestamps, {}, why, samples.replica_timestamps)
    hops: dict[str, HopStats] = {}
    for name in samples.names:
        values = [float(h[name]) for _, h in samples.rows if name in h]
        if values:
            hops[name] = HopStats.of(values)
    return HopLatency(
        from_ms, len(samples.rows), samples.input_timestamps, hops, None,
        samples.replica_timestamps,
    )  # fmt: skip


def hop_latency(
    inputs: Sequence[InputRecord],
    replicas: Sequence[Sequence[InputRecord]],
    output: Sequence[InputRecord],
    *,
    from_ms: int | None = None,
) -> HopLatency:
    """:func:`summarise` of :func:`hop_samples` (same arguments)."""
    return summarise(hop_samples(inputs, replicas, output, from_ms=from_ms), from_ms)
