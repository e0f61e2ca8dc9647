"""The metrics endpoint (``arfl deploy --metrics-port N``): what the live view shows, served for
Prometheus to scrape and Grafana to draw.

:class:`MetricsExporter` is a ``prometheus_client`` collector fed with the deployment's ticks
(:class:`~arfl.orchestrate.watch.Tick`: the live view's own data, so nothing polls Kafka or the
run's files a second time), plus one file the live view does not read: the end-to-end latency
histogram is built from the merger's 1-s interval histograms in ``latency.hlog``, the same
intervals whose percentiles the monitor lines (and the live view) show. Percentiles of an
interval cannot be added up or re-bucketed, the interval's whole distribution can: each
interval's HdrHistogram counts are added to fixed Prometheus buckets, so ``histogram_quantile``
works over any range, to the log's 3 significant digits. The log is read as it grows, when
scraped. The last interval's percentiles are exported as they are too (a gauge with a
``quantile`` label), as the live view shows them.

:func:`serve_metrics` serves one exporter over HTTP (``prometheus_client``'s server, Prometheus
text or OpenMetrics as the scraper asks) for the life of a deployment, or of an experiment's
runs one after the other (each run's series carry its own ``run`` label). Metric names, types
and labels: ``docs/metrics.md``.
"""

from __future__ import annotations

import bisect
import errno
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from arfl.errors import ReportError, SpecError
from arfl.measure.histogram import LatencyLogTail
from arfl.orchestrate.slots import Status
from arfl.orchestrate.watch import FaultState, Tick
from arfl.run.streams import InjectorSecond, MonitorSnapshot, Percentiles
from arfl.stack.processes import describe, port_owner

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
    0.15, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
)  # fmt: skip
"""Upper bounds (seconds) from 1 ms to 60 s: dense where a steady pipeline's p50..p99 lie
(a few ms to a few tens), coarse out to a restart's stall; ``+Inf`` above."""

PHASES: tuple[str, ...] = (
    "starting", "warming_up", "running", "draining", "stopping", "checking", "finished", "failed",
)  # fmt: skip
"""The values of ``arfl_deploy_phase``'s ``phase`` label (the live view's phase, grouped: every
start-up step is ``starting``)."""

_PHASE_OF = {
    "warming up": "warming_up",
    "running": "running",
    "draining": "draining",
    "stopping": "stopping",
    "checking the output": "checking",
}

REPLICA_STATES: tuple[str, ...] = get_args(Status)
"""The supervisor's statuses, the values of ``arfl_replica_state``'s ``state`` label."""

Kind = Literal["gauge", "counter", "histogram", "info"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric the exporter defines: its family name (a counter's without ``_total``, an
    info's without ``_info``), type, help text and label names."""

    name: str
    kind: Kind
    doc: str
    labels: tuple[str, ...] = ("run",)

    def family(self) -> Metric:
        """An empty family of this metric, to add samples to."""
        labels = list(self.labels)
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.doc, labels=labels)
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.doc, labels=labels)
        if self.kind == "histogram":
            return HistogramMetricFamily(self.name, self.doc, labels=labels)
        return InfoMetricFamily(self.name, self.doc, labels=labels)


_R = ("run", "replica")
_F = ("run", "fault", "kind", "replica")
METRICS: dict[str, MetricSpec] = {
    m.name: m
    for m in (
        MetricSpec("arfl_run", "info", "The run: its spec's name, mode and replica count."),
        MetricSpec(
            "arfl_deploy_phase",
            "gauge",
            "1 for the deployment's current phase, 0 for the others.",
            ("run", "phase"),
        ),
        MetricSpec(
            "arfl_latency_seconds",
            "histogram",
            "End-to-end latency of every result (first copies, from the input's intended send "
            "time), from the merger's 1-s interval histograms (latency.hlog).",
        ),
        MetricSpec(
            "arfl_latency_interval_seconds",
            "gauge",
            "End-to-end latency percentiles of the merger's last 1-s interval (quantile 1: the "
            "interval's max).",
            ("run", "quantile"),
        ),
        MetricSpec(
            "arfl_latency_cumulative_seconds",
            "gauge",
            "End-to-end latency percentiles of the whole run so far (quantile 1: the max).",
            ("run", "quantile"),
        ),
        MetricSpec(
            "arfl_output_rate",
            "gauge",
            "First-copy results per second in the merger's last interval.",
        ),
        MetricSpec("arfl_input_rate", "gauge", "Input events sent in the injector's last second."),
        MetricSpec("arfl_input_target_rate", "gauge", "Input events per second the schedule asks."),
        MetricSpec("arfl_input_events", "counter", "Input events sent."),
        MetricSpec("arfl_results", "counter", "Results written to the final topic (first copies)."),
        MetricSpec("arfl_duplicates", "counter", "Copies of a result the merger dropped."),
        MetricSpec(
            "arfl_divergent", "counter", "Copies whose content differed from the first copy."
        ),
        MetricSpec(
            "arfl_bad_records", "counter", "Replica output records the merger could not use."
        ),
        MetricSpec(
            "arfl_output_gap_seconds", "gauge", "Time since the last result reached the output."
        ),
        MetricSpec(
            "arfl_output_longest_gap_seconds",
            "gauge",
            "The longest time between two results so far while input flowed.",
        ),
        MetricSpec(
            "arfl_replica_lag_seconds",
            "gauge",
            "Wall time minus the source time of the newest result a replica delivered.",
            _R,
        ),
        MetricSpec(
            "arfl_replica_trail_seconds",
            "gauge",
            "Age of the oldest result the output has that a replica has not delivered "
            "(two or more replicas).",
            _R,
        ),
        MetricSpec(
            "arfl_replica_received", "counter", "Records the merger read from a replica.", _R
        ),
        MetricSpec(
            "arfl_replica_first_copies",
            "counter",
            "Results a replica delivered first (the copies that reached the output).",
            _R,
        ),
        MetricSpec(
            "arfl_replica_state",
            "gauge",
            "1 for a replica's current supervision state, 0 for the others.",
            ("run", "replica", "state"),
        ),
        MetricSpec(
            "arfl_replica_restarts", "counter", "Times the supervisor restarted a replica.", _R
        ),
        MetricSpec(
            "arfl_fault_active",
            "gauge",
            "1 while an injected fault is active, 0 once reverted (an instant fault, a kill, "
            "is reverted as soon as injected).",
            _F,
        ),
        MetricSpec(
            "arfl_fault_injected_timestamp_seconds",
            "gauge",
            "When a fault was injected (epoch seconds): one Grafana annotation per fault.",
            _F,
        ),
        MetricSpec(
            "arfl_merger_takeovers",
            "counter",
            "Times another merger took a dead one's place (the standby, or a new merger).",
        ),
    )
}


def phase_label(phase: str) -> str:
    """The ``phase`` label of a live-view phase text (:data:`PHASES`)."""
    return _PHASE_OF.get(phase, "starting")


def quantile_label(key: str) -> str | None:
    """``"p99.9"`` -> ``"0.999"``, ``"max"`` -> ``"1"``; None for anything else (``count``)."""
    if key == "max":
        return "1"
    if not key.startswith("p"):
        return None
    try:
        return f"{round(float(key[1:]) / 100.0, 9):g}"
    except ValueError:
        return None


HEAD_BYTES = 512
"""How much of a latency log's start is compared to tell a rewritten log (its header)."""


class LatencyBuckets:
    """Prometheus histogram buckets over every interval of a ``latency.hlog``, read as it grows.

    A value is put in the first bucket whose bound is at least its HdrHistogram bin's lowest
    value (within the log's 0.1 %). A restarted merger appends to the log; one that starts it
    anew rewrites it (a new ``StartTime``): a log whose start is no longer what was read, or
    that is shorter, is read again from its start, the counts kept.

    Args:
        path: the run's ``latency.hlog``.
        bounds_s: upper bounds in seconds, ascending.
    """

    def __init__(self, path: Path, bounds_s: Sequence[float] = LATENCY_BUCKETS_S) -> None:
        self.path = path
        self.bounds_s = tuple(bounds_s)
        self._bounds_us = [round(b * 1e6) for b in self.bounds_s]
        self.counts = [0] * (len(self.bounds_s) + 1)
        """Per bucket (not cumulative), the last one above every bound."""
        self.sum_s = 0.0
        self.intervals = 0
        self.error: str | None = None
        """Why the log is no longer read (an unreadable line); the counts so far stay."""
        self._tail: LatencyLogTail | None = None
        self._head = b""
        """The log's first bytes as read (its header: the start time)."""

    def update(self) -> None:
        """Add the intervals logged since the last update."""
        if self.error is not None:
            return
        if self._tail is not None and self._rewritten(self._tail.offset):
            self._tail.close()
            self._tail = None
            self._head = b""
        if self._tail is None:
            self._tail = LatencyLogTail(self.path)
        try:
            intervals = self._tail.read()
        except ReportError as e:
            self.error = str(e)
            return
        for iv in intervals:
            self.add(iv.histogram)
            self.intervals += 1
        if len(self._head) < HEAD_BYTES:
            self._head = self._read_head(min(self._tail.offset, HEAD_BYTES))

    def add(self, histogram: Any) -> None:
        """Add one HdrHistogram (microseconds) to the buckets and the sum."""
        n = min(int(histogram.counts_len), int(histogram.encoder.payload.counts_len))
        for index, c in enumerate(histogram.counts[:n]):
            if not c:
                continue
            low = int(histogram.get_value_from_index(index))
            high = int(histogram.get_highest_equivalent_value(low))
            self.counts[bisect.bisect_left(self._bounds_us, low)] += c
            self.sum_s += c * (low + high) / 2.0 / 1e6

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last (the total)."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, c in zip(self.bounds_s, self.counts, strict=False):
            total += c
            le = floatToGoString(bound)  # type: ignore[no-untyped-call]  # as Histogram writes it
            out.append((str(le), float(total)))
        out.append(("+Inf", float(total + self.counts[-1])))
        return out

    def close(self) -> None:
        """Close the log."""
        if self._tail is not None:
            self._tail.close()
            self._tail = None

    def _rewritten(self, offset: int) -> bool:
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return False
        return size < offset or self._read_head(len(self._head)) != self._head

    def _read_head(self, n: int) -> bytes:
        try:
            with open(self.path, "rb") as f:
                return f.read(n)
        except OSError:
            return b""


class _Run:
    """What the exporter knows of one run: the latest tick, and what must not go backwards
    when a tick lacks it (counters while stopping, when the live view shows no snapshot)."""

    def __init__(self, run_id: str, hlog: Path, info: Mapping[str, str]) -> None:
        self.run_id = run_id
        self.info = dict(info)
        self.phase = "starting"
        self.ended = False
        self.tick: Tick | None = None
        self.snapshot: MonitorSnapshot | None = None
        """The newest monitor line seen (its counters are cumulative)."""
        self.input_total = 0
        self.restarts: dict[int, int] = {}
        self.faults: dict[int, FaultState] = {}
        self.merger_restarts = 0
        self.latency = LatencyBuckets(hlog)

    def observe(self, tick: Tick) -> None:
        self.tick = tick
        self.phase = phase_label(tick.phase)
        if tick.snapshot is not None:
            self.snapshot = tick.snapshot
        if tick.injector is not None:
            self.input_total = max(self.input_total, tick.injector.total)
        for r, n in tick.restarts.items():
            self.restarts[r] = max(n, self.restarts.get(r, 0))
        self.faults.update({f.index: f for f in tick.injected})
        self.merger_restarts = max(self.merger_restarts, tick.merger_restarts)

    def families(self) -> list[Metric]:
        fam = {name: spec.family() for name, spec in METRICS.items()}
        run = self.run_id
        tick = self.tick
        now: MonitorSnapshot | None = tick.snapshot if tick is not None else None
        inj: InjectorSecond | None = tick.injector if tick is not None else None
        info = fam["arfl_run"]
        assert isinstance(info, InfoMetricFamily)
        info.add_metric([run], self.info)
        _gauge(fam, "arfl_deploy_phase", [(run, p, float(p == self.phase)) for p in PHASES])
        hist = fam["arfl_latency_seconds"]
        assert isinstance(hist, HistogramMetricFamily)
        hist.add_metric([run], self.latency.buckets(), self.latency.sum_s)
        if now is not None:
            _quantiles(fam, "arfl_latency_interval_seconds", run, now.interval)
        if self.snapshot is not None:
            _quantiles(fam, "arfl_latency_cumulative_seconds", run, self.snapshot.cumulative)
        rate = 0.0
        if now is not None:
            rate = now.output_rate / now.interval_s if now.interval_s > 0 else now.output_rate
        _gauge(fam, "arfl_output_rate", [(run, rate)])
        _gauge(fam, "arfl_input_rate", [(run, float(inj.sent) if inj is not None else 0.0)])
        if inj is not None:
            _gauge(fam, "arfl_input_target_rate", [(run, float(inj.target))])
        _counter(fam, "arfl_input_events", [(run, self.input_total)])
        _counter(fam, "arfl_merger_takeovers", [(run, self.merger_restarts)])
        last = self.snapshot
        if last is not None:
            _counter(fam, "arfl_results", [(run, last.results)])
            _counter(fam, "arfl_duplicates", [(run, last.duplicates_total)])
            _counter(fam, "arfl_divergent", [(run, last.divergent)])
            _counter(fam, "arfl_bad_records", [(run, last.bad)])
            _gauge(fam, "arfl_output_longest_gap_seconds", [(run, last.longest_gap_ms / 1e3)])
            reps = sorted(last.replicas.items())
            _counter(fam, "arfl_replica_received", [(run, str(r), s.received) for r, s in reps])
            _counter(fam, "arfl_replica_first_copies", [(run, str(r), s.wins) for r, s in reps])
        if now is not None:
            _gauge(fam, "arfl_output_gap_seconds", [(run, now.current_gap_ms / 1e3)])
            reps = sorted(now.replicas.items())
            _gauge(
                fam,
                "arfl_replica_lag_seconds",
                [(run, str(r), s.lag_ms / 1e3) for r, s in reps if s.lag_ms is not None],
            )
            _gauge(
                fam,
                "arfl_replica_trail_seconds",
                [(run, str(r), s.trail_ms / 1e3) for r, s in reps if s.trail_ms is not None],
            )
        if tick is not None:
            _gauge(
                fam,
                "arfl_replica_state",
                [
                    (run, str(r), state, float(state == status))
                    for r, status in sorted(tick.statuses.items())
                    for state in _states(status)
                ],
            )
        _counter(
            fam,
            "arfl_replica_restarts",
            [(run, str(r), n) for r, n in sorted(self.restarts.items())],
        )
        faults = [self.faults[i] for i in sorted(self.faults)]
        _gauge(
            fam, "arfl_fault_active", [(run, *_fault_labels(f), float(f.active)) for f in faults]
        )
        _gauge(
            fam,
            "arfl_fault_injected_timestamp_seconds",
            [(run, *_fault_labels(f), f.injected_at) for f in faults],
        )
        return list(fam.values())


def _states(status: str) -> tuple[str, ...]:
    """Every state label a replica gets a series for: the known ones, and an unknown current."""
    return REPLICA_STATES if status in REPLICA_STATES else (*REPLICA_STATES, status)


def _fault_labels(f: FaultState) -> tuple[str, str, str]:
    return str(f.index), f.kind, "" if f.replica is None else str(f.replica)


def _gauge(fam: dict[str, Metric], name: str, rows: Sequence[tuple[Any, ...]]) -> None:
    family = fam[name]
    assert isinstance(family, GaugeMetricFamily)
    for *labels, value in rows:
        family.add_metric([str(v) for v in labels], float(value))


def _counter(fam: dict[str, Metric], name: str, rows: Sequence[tuple[Any, ...]]) -> None:
    family = fam[name]
    assert isinstance(family, CounterMetricFamily)
    for *labels, value in rows:
        family.add_metric([str(v) for v in labels], float(value))


def _quantiles(fam: dict[str, Metric], name: str, run: str, pct: Percentiles) -> None:
    rows = []
    for key, ms in pct.items():
        q = quantile_label(key)
        if q is not None and ms is not None:
            rows.append((run, q, ms / 1e3))
    _gauge(fam, name, rows)


class MetricsExporter:
    """A ``prometheus_client`` collector of one deployment at a time (an experiment's runs one
    after the other: :meth:`begin` replaces the run whose series are served).

    Thread-safe: ticks come from the watch or the heartbeat thread, scrapes from the HTTP
    server's threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._run: _Run | None = None

    def begin(
        self, run_id: str, hlog: Path, *, spec: str = "", mode: str = "", replicas: int = 0
    ) -> None:
        """Serve a new run's series (the run before's are dropped).

        Args:
            run_id: the ``run`` label (the run directory's name).
            hlog: the run's ``latency.hlog`` (it need not exist yet).
            spec, mode, replicas: ``arfl_run_info``'s labels.
        """
        with self._lock:
            if self._run is not None:
                self._run.latency.close()
            info = {"spec": spec, "mode": mode, "replicas": str(replicas)}
            self._run = _Run(run_id, hlog, info)

    def observe(self, tick: Tick) -> None:
        """Take the live view's latest tick (ignored before :meth:`begin` or after :meth:`end`)."""
        with self._lock:
            if self._run is not None and not self._run.ended:
                self._run.observe(tick)

    def end(self, ok: bool) -> None:
        """The deployment is over: phase ``finished`` (or ``failed``); the series stay served
        as they were until the next :meth:`begin` or the server's end."""
        with self._lock:
            if self._run is not None:
                self._run.phase = "finished" if ok else "failed"
                self._run.ended = True

    def tee(self, on_tick: Callable[[Tick], None] | None) -> Callable[[Tick], None]:
        """A tick callback that feeds this exporter, then ``on_tick`` (which may be None)."""

        def both(tick: Tick) -> None:
            self.observe(tick)
            if on_tick is not None:
                on_tick(tick)

        return both

    def describe(self) -> Iterator[Metric]:
        """Every metric this exporter defines, without samples (the registry's name check)."""
        for spec in METRICS.values():
            yield spec.family()

    def collect(self) -> list[Metric]:
        """The current run's metrics; the latency log read up to its end first."""
        with self._lock:
            if self._run is None:
                return []
            self._run.latency.update()
            return self._run.families()

    def close(self) -> None:
        """Close the latency log."""
        with self._lock:
            if self._run is not None:
                self._run.latency.close()


class MetricsServer:
    """An HTTP server for one :class:`MetricsExporter` (``/metrics``), in a daemon thread.

    Raises:
        SpecError: the address cannot be served: in use (the message names what holds it),
            not an address of this host, a privileged port.
    """

    def __init__(self, host: str, port: int, exporter: MetricsExporter | None = None) -> None:
        self.exporter = exporter or MetricsExporter()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.exporter)
        try:
            self._httpd, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as e:
            raise SpecError(bind_problem(host, port, e)) from None
        self.host = host
        self.port = int(self._httpd.server_port)

    @property
    def url(self) -> str:
        """Where to scrape (:func:`metrics_url`)."""
        return metrics_url(self.host, self.port)

    def close(self) -> None:
        """Stop serving and free the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5.0)
        self.exporter.close()


def metrics_url(host: str, port: int) -> str:
    """``http://host:port/metrics`` (an IPv6 address in brackets)."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"


def bind_problem(host: str, port: int, error: OSError) -> str:
    """Why ``host:port`` cannot be served, and what to do, for an error's message."""
    where = f"{host}:{port}"
    if error.errno == errno.EADDRINUSE:
        owner = port_owner(host, port)
        held = f" ({describe(owner)})" if owner is not None else ""
        return (
            f"--metrics-port {port}: {where} is already in use{held}; pick a free port with "
            "--metrics-port N, or stop what listens there"
        )
    if error.errno == errno.EACCES:
        return f"--metrics-port {port}: not allowed to listen on {where}; use a port above 1023"
    return (
        f"cannot serve metrics on {where}: {error.strerror or error}; check --metrics-host "
        "(an address of this host) and --metrics-port"
    )


@contextmanager
def serve_metrics(
    host: str, port: int, exporter: MetricsExporter | None = None
) -> Iterator[MetricsServer]:
    """Serve an exporter on ``host:port`` until the ``with`` ends (port 0: one the kernel
    picks, :attr:`MetricsServer.port`).

    Raises:
        SpecError: see :class:`MetricsServer`.
    """
    server = MetricsServer(host, port, exporter)
    try:
        yield server
    finally:
        server.close()
