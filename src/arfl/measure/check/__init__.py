"""An independent completeness check: the final output against results computed without Spark.

It shares no code with the replicas' Spark query (``arfl.replica.query``): a small evaluator
of the spec's steps (:mod:`.expr`, :mod:`.evaluate`) recomputes every expected result and its
result id from the input topic, and :mod:`.compare` counts missing, extra, duplicated and wrong
results. Pipelines outside the modelled subset (docs/correctness.md) get
``unsupported: <why>`` instead of a guess. A window under real-time mode
(``spec.emits_updates``) is checked update by update (``<window>#<n>``), and each window's last
delivered update against its expected final value.

Entry points:

* :func:`check` (pure): a spec, the input topic's records and the final output's records;
* :func:`check_run`: the same for a run directory, reading both topics from the run's Kafka.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from arfl.configs.expr import Unsupported
from arfl.configs.spec import Spec
from arfl.measure.check.compare import Delivered, IndependentCheck, compare
from arfl.measure.check.evaluate import InputRecord, expected_results
from arfl.measure.check.skew import input_skew

__all__ = ["Delivered", "IndependentCheck", "InputRecord", "check", "check_run"]


def check(
    spec: Spec, input_records: Iterable[InputRecord], output: Iterable[Delivered]
) -> IndependentCheck:
    """Compare the final output with the results ``spec`` implies for the input.

    Args:
        spec: the pipeline.
        input_records: every record of the input topic (offset order within a partition).
        output: every record of the final output topic.

    Returns:
        The counts and examples, and the input's records per partition and per key
        (``workload``); ``unsupported`` set (and counts None) when the spec or a value of its
        input is outside the modelled subset.
    """
    records = list(input_records)
    skew = input_skew(records, spec.source.partitions)
    try:
        expected = expected_results(spec, records)
    except Unsupported as e:
        return dataclasses.replace(IndependentCheck.not_supported(str(e)), workload=skew)
    return dataclasses.replace(compare(expected, output), workload=skew)


def check_run(run_dir: Path, timeout_s: float = 120.0) -> IndependentCheck:
    """:func:`check` for a finished run, reading its topics from its Kafka.

    An unsupported spec is answered without touching Kafka.

    Raises:
        ReportError: the run directory lacks the names, or Kafka or a topic is unavailable.
    """
    from arfl.measure.check.hops import hop_latency
    from arfl.measure.check.kafka import (
        delivered,
        input_start_ms,
        read_records,
        replica_topics,
        run_names,
    )
    from arfl.measure.check.pipeline import compile_pipeline

    spec, bootstrap, source, sink = run_names(run_dir)
    try:
        compile_pipeline(spec)
    except Unsupported as e:
        return IndependentCheck.not_supported(str(e))
    inputs = read_records(bootstrap, source, timeout_s)
    out_records = read_records(bootstrap, sink, timeout_s)
    result = check(spec, inputs, delivered(out_records))
    start = input_start_ms(run_dir)
    from_ms = None if start is None else start + round(_warmup_s(run_dir, spec, start) * 1000)
    # A window's result names no input record: its replicas' topics are not worth reading.
    topics = [] if spec.has_window else replica_topics(run_dir)
    replicas = [read_records(bootstrap, t, timeout_s) for t in topics]
    hops = hop_latency(inputs, replicas, out_records, from_ms=from_ms)
    return dataclasses.replace(result, hops=hops)


def _warmup_s(run_dir: Path, spec: Spec, start_ms: int) -> float:
    """The run's warm-up, as the report takes it (:func:`arfl.run.steady.resolve_warmup`, from
    the replicas' progress files, the merger's 1-s p99s and the first fault): the hops are
    measured over what the report calls steady."""
    from arfl.run.events import Event
    from arfl.run.rundir import RunPaths, read_jsonl
    from arfl.run.steady import resolve_warmup

    paths = RunPaths(run_dir)
    progress = {r: read_jsonl(paths.progress(r)) for r in range(spec.replication.replicas)}
    output = [
        (float(m["t"]), (m.get("interval") or {}).get("p99"))
        for m in read_jsonl(paths.monitor)
        if isinstance(m.get("t"), int | float)
    ]
    injected = [
        float(e["started"])
        for e in read_jsonl(paths.journal)
        if e.get("event") == Event.FAULT_INJECTED and isinstance(e.get("started"), int | float)
    ]
    until = min(injected, default=None)
    return resolve_warmup(spec, start_ms / 1000, progress, output=output, until=until).seconds
