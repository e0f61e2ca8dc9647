"""The merger's per-second monitor stream and the injector's stats, typed and tailable.

``monitor.jsonl`` (one line per second, written by the merger)::

    {"t": 1764106201.0, "interval_s": 1.0, "output_rate": 1000, "received": 2000,
     "duplicates": 1000,
     "interval": {"p50": 3.1, "p90": 5.2, "p99": 9.0, "p99.9": 11.0, "max": 12.5, "count": 1000},
     "cumulative": {...same keys...},
     "longest_gap_ms": 15.0, "current_gap_ms": 0.4, "input_flowing": true,
     "results": 5000, "duplicates_total": 5000, "divergent": 0, "bad": 0, "evicted": 0,
     "replicas": {"0": {"received": 2500, "wins": 2600, "last_seen_t": 1764106200.99,
                        "last_src_ts": 1764106200990, "lag_ms": 10.0, "trail_ms": 4.0,
                        "bad": 0}, ...}}

The injector's stats file (one ``"type": "second"`` line per second, one ``"type": "summary"``
line at the end)::

    {"type": "second", "t": 1764106201.0, "t0": 1764106200.0, "sent": 1000, "target": 1000,
     "behind_ms": 0.2, "total": 1000, "clock_ms": 0.0}
    {"type": "summary", "t": ..., "t0": ..., "end": ..., "produced": 5000, "delivered": 5000,
     "failed": 0, "target_rate": 1000, "achieved_rate": 999.8, "max_behind_ms": 3.1,
     "duration_s": 5.0, "stopped_early": false}
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arfl.coerce import opt_float, opt_int

Percentiles = dict[str, float | None]
"""``{"p50": ms, ..., "max": ms, "count": n}``; ``None`` where nothing was recorded."""


def _percentiles(v: Any) -> Percentiles:
    if not isinstance(v, dict):
        return {}
    return {str(k): opt_float(x) for k, x in v.items()}


@dataclass(frozen=True)
class ReplicaSnapshot:
    """What the merger saw from one replica's output topic, cumulative."""

    received: int
    wins: int
    """Results this replica delivered first."""
    last_seen_t: float | None
    """Epoch seconds of the last record received from it."""
    last_src_ts: int | None
    """The newest ``src_ts`` (ms) it delivered."""
    lag_ms: float | None
    """Wall time at the snapshot minus ``last_src_ts``: grows while the replica is silent."""
    bad: int = 0
    trail_ms: float | None = None
    """How far it trails the output: the age of the oldest result the output has that it has
    not delivered (0: none); None with one replica, or in a run recorded before it existed."""
    ended: dict[int, float] = field(default_factory=dict)
    """Input partition -> when its latest marker copy of that partition was appended to its
    topic (epoch s; :mod:`arfl.run.records`): it had read the partition to the end."""

    @property
    def behind_ms(self) -> float | None:
        """How far it is behind, as "caught up" is judged (docs/design.md §4): its trail where
        the merger kept one (two or more replicas), else its lag."""
        return self.trail_ms if self.trail_ms is not None else self.lag_ms

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReplicaSnapshot:
        """Parse one entry of the ``replicas`` object."""
        return cls(
            received=int(d.get("received", 0)),
            wins=int(d.get("wins", 0)),
            last_seen_t=opt_float(d.get("last_seen_t")),
            last_src_ts=opt_int(d.get("last_src_ts")),
            lag_ms=opt_float(d.get("lag_ms")),
            bad=int(d.get("bad", 0)),
            trail_ms=opt_float(d.get("trail_ms")),
            ended={int(k): float(v) for k, v in (d.get("ended") or {}).items()},
        )


@dataclass(frozen=True)
class MonitorSnapshot:
    """One line of ``monitor.jsonl``: the merger's view of one second."""

    t: float
    """Epoch seconds at the end of the interval."""
    interval_s: float
    output_rate: int
    """New (first-copy) results in this interval."""
    received: int
    """Records received from all replicas in this interval."""
    duplicates: int
    """Copies dropped in this interval."""
    interval: Percentiles
    cumulative: Percentiles
    longest_gap_ms: float
    current_gap_ms: float
    input_flowing: bool
    results: int
    duplicates_total: int
    divergent: int
    bad: int
    evicted: int
    """Ids a merger with a size-bounded dedup forgot (0 in a bounded-dedup merger's lines)."""
    dedup_entries: int = 0
    """Ids in the merger's exact dedup memory."""
    uncompared: int = 0
    """Duplicates decided by a channel floor, without a hash left to compare."""
    replicas: dict[int, ReplicaSnapshot] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MonitorSnapshot:
        """Parse a decoded ``monitor.jsonl`` line.

        Raises:
            KeyError, TypeError, ValueError: not a monitor line.
        """
        reps = d.get("replicas") or {}
        return cls(
            t=float(d["t"]),
            interval_s=float(d.get("interval_s", 1.0)),
            output_rate=int(d["output_rate"]),
            received=int(d.get("received", 0)),
            duplicates=int(d.get("duplicates", 0)),
            interval=_percentiles(d.get("interval")),
            cumulative=_percentiles(d.get("cumulative")),
            longest_gap_ms=float(d.get("longest_gap_ms", 0.0)),
            current_gap_ms=float(d.get("current_gap_ms", 0.0)),
            input_flowing=bool(d.get("input_flowing", False)),
            results=int(d.get("results", 0)),
            duplicates_total=int(d.get("duplicates_total", 0)),
            divergent=int(d.get("divergent", 0)),
            bad=int(d.get("bad", 0)),
            evicted=int(d.get("evicted", 0)),
            dedup_entries=int(d.get("dedup_entries", 0)),
            uncompared=int(d.get("uncompared", 0)),
            replicas={int(k): ReplicaSnapshot.from_dict(v) for k, v in reps.items()},
        )


@dataclass(frozen=True)
class InjectorSecond:
    """One per-second line of the injector's stats file."""

    t: float
    """Epoch seconds at the end of the second."""
    t0: float
    """Epoch seconds when the schedule started (event 0's intended time)."""
    sent: int
    target: int
    behind_ms: float
    """The most the injector was behind its schedule during this second."""
    total: int
    clock_ms: float | None = None
    """How far the host's wall clock had moved against its monotonic clock since ``t0``, ms
    (None: recorded before the injector kept it)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InjectorSecond:
        """Parse a decoded ``"type": "second"`` line."""
        return cls(
            t=float(d["t"]),
            t0=float(d["t0"]),
            sent=int(d["sent"]),
            target=int(d["target"]),
            behind_ms=float(d["behind_ms"]),
            total=int(d.get("total", 0)),
            clock_ms=opt_float(d.get("clock_ms")),
        )


@dataclass(frozen=True)
class InjectorSummary:
    """The injector's final line: what it produced and how well it kept its schedule."""

    t0: float
    end: float
    produced: int
    delivered: int
    failed: int
    target_rate: int
    achieved_rate: float
    max_behind_ms: float
    duration_s: float
    stopped_early: bool
    bad: int | None = None
    """Replay only: records of the recorded topic skipped as unusable (not a JSON object, no
    recorded time); None for the generator."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InjectorSummary:
        """Parse a decoded ``"type": "summary"`` line (or :meth:`to_dict` output)."""
        return cls(
            t0=float(d["t0"]),
            end=float(d["end"]),
            produced=int(d["produced"]),
            delivered=int(d["delivered"]),
            failed=int(d["failed"]),
            target_rate=int(d["target_rate"]),
            achieved_rate=float(d["achieved_rate"]),
            max_behind_ms=float(d["max_behind_ms"]),
            duration_s=float(d["duration_s"]),
            stopped_early=bool(d.get("stopped_early", False)),
            bad=None if d.get("bad") is None else int(d["bad"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The summary line's fields (without ``type``/``t``)."""
        return {
            "t0": self.t0,
            "end": self.end,
            "produced": self.produced,
            "delivered": self.delivered,
            "failed": self.failed,
            "target_rate": self.target_rate,
            "achieved_rate": self.achieved_rate,
            "max_behind_ms": self.max_behind_ms,
            "duration_s": self.duration_s,
            "stopped_early": self.stopped_early,
            **({} if self.bad is None else {"bad": self.bad}),
        }


class JsonlTail:
    """Reads the lines appended to a JSONL file since the last call.

    The file may not exist yet; a line still being written (no newline) waits for the next
    call; lines that are not JSON objects are skipped.
    """

    def __init__(self, path: Path, *, from_end: bool = False) -> None:
        """``from_end``: only lines appended after now (a line cut at the current end is
        skipped as not JSON)."""
        self.path = path
        self._offset = 0
        if from_end:
            with contextlib.suppress(OSError):
                self._offset = path.stat().st_size
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        """Every complete JSON object appended since the previous call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        out: list[dict[str, Any]] = []
        for line in lines:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out


class MonitorTail:
    """Tails ``monitor.jsonl`` and keeps the latest :class:`MonitorSnapshot`."""

    def __init__(self, path: Path, *, from_end: bool = False) -> None:
        self._tail = JsonlTail(path, from_end=from_end)
        self.latest: MonitorSnapshot | None = None

    def poll(self) -> list[MonitorSnapshot]:
        """Snapshots appended since the last poll (oldest first); updates :attr:`latest`."""
        out: list[MonitorSnapshot] = []
        for d in self._tail.read_new():
            try:
                out.append(MonitorSnapshot.from_dict(d))
            except (KeyError, TypeError, ValueError):
                continue
        if out:
            self.latest = out[-1]
        return out


class InjectorStatsTail:
    """Tails the injector's stats file: the latest second and, once written, the summary."""

    def __init__(self, path: Path) -> None:
        self._tail = JsonlTail(path)
        self.latest: InjectorSecond | None = None
        self.summary: InjectorSummary | None = None
        self.t0: float | None = None

    def poll(self) -> list[InjectorSecond]:
        """Per-second lines appended since the last poll; updates the fields above."""
        out: list[InjectorSecond] = []
        for d in self._tail.read_new():
            try:
                if d.get("type") == "summary":
                    self.summary = InjectorSummary.from_dict(d)
                    self.t0 = self.summary.t0
                elif d.get("type") == "second":
                    sec = InjectorSecond.from_dict(d)
                    out.append(sec)
                    self.t0 = sec.t0
            except (KeyError, TypeError, ValueError):
                continue
        if out:
            self.latest = out[-1]
        return out
