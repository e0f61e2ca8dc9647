"""Correctness of a run's results: expected, missing, duplicates, divergent.

Three bases, the first that applies wins:

* what was asked for: ``recomputed`` (``--recompute``) or ``independent`` (``--check``);
* ``independent`` (default when deploy wrote ``check.json``): :mod:`arfl.measure.check`
  recomputed the expected results from the input topic without Spark and compared them with
  the final output (``missing``, ``extra``, ``duplicates``, ``wrong`` values);
* ``merger`` (otherwise, no services needed): the merger's counters from ``merger.json`` /
  ``summary.json``. ``expected`` is known only for pipelines where every input event yields
  exactly one result (no filter, window or transform step: expected = events produced);
  ``duplicates`` is 0 when the merger's dedup is bounded by channel floors (it forwards no id
  twice, docs/design.md "Bounded dedup") or, for a merger that bounded it by size, evicted
  nothing; unknown otherwise; ``divergent`` counts copies whose content hash differed between
  replicas.
* ``recomputed`` (``arfl report --recompute``; needs the run's Kafka and starts a Spark batch
  job): :func:`arfl.replica.offline.recompute` recomputes the expected results from the input
  topic and the sink topic is read back; ``missing`` = expected final results not in the sink,
  ``duplicates`` = sink records beyond the first per result id, ``divergent`` = the merger's
  count plus sink results whose content differs from the recomputation.

**Update runs** (``spec.emits_updates``: window results are updates ``<window>#<n>`` under
real-time mode, see :mod:`arfl.run.records`): the counts above are over update ids, with their
meaning unchanged; the answer has ``updates`` set and adds ``windows`` (distinct windows among
the delivered updates) and ``final_values_checked`` / ``final_values_wrong`` (each window's last
delivered update, :func:`~arfl.run.records.final_values`, against the expected final value).
The merger basis cannot tell those: they are None there.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping

from arfl.coerce import try_int
from arfl.errors import ArflError, ReportError
from arfl.report.model import Correctness
from arfl.report.rundata import RunData
from arfl.run.events import CHECK_FAILED, Event
from arfl.run.records import BadRecord, Result, final_values, parse_result

FINAL_VALUES_HINT = (
    "updates: a window's final value is its update with the largest n; the final topic keys "
    "every update by its window rid (docs/report-json.md, 'Update runs')"
)
"""The note every update run's correctness carries: where to find the windows' final values."""


def _updates_notes(windows: int | None, checked: int | None, wrong: int | None) -> list[str]:
    """The notes of an update run: its window counts in words, and :data:`FINAL_VALUES_HINT`."""
    w, c, x = ("unknown" if v is None else v for v in (windows, checked, wrong))
    return [
        f"updates: {w} windows delivered; final values (each window's last update) "
        f"{c} checked, {x} wrong",
        FINAL_VALUES_HINT,
    ]


def from_merger(data: RunData) -> Correctness:
    """Correctness from the merger's and injector's own counts (see the module docstring)."""
    merged = data.merger or dict(data.summary.get("merger") or {})
    last = data.monitor[-1] if data.monitor else None
    notes: list[str] = []
    results = try_int(merged.get("results"))
    if results is None and last is not None:
        results = last.results
        notes.append("results from the last monitor line (no merger.json)")
    divergent = try_int(merged.get("divergent"))
    if divergent is None and last is not None:
        divergent = last.divergent
    evicted = try_int(merged.get("evicted"))
    if evicted is None and last is not None:
        evicted = last.evicted
    produced = (
        data.injector_summary.produced
        if data.injector_summary is not None
        else try_int(data.summary.get("produced"))
    )
    one_to_one = all(s.kind == "select" for s in data.spec.steps)
    expected: int | None = None
    missing: int | None = None
    if one_to_one and produced is not None:
        expected = produced
        missing = max(0, produced - results) if results is not None else None
        notes.append("expected = events produced (every event yields one result)")
    else:
        notes.append(
            "expected unknown without --recompute (filters/windows change the result count)"
        )
    duplicates: int | None = None
    if "uncompared" in merged:
        duplicates = 0
        notes.append(
            "duplicates = 0: the merger forwards a copy only above its channel's floor and "
            "outside its exact memory (docs/design.md, Bounded dedup)"
        )
    elif evicted == 0:
        duplicates = 0
        notes.append("duplicates = 0: the merger evicted no result id, so emitted each once")
    elif evicted is not None:
        notes.append(
            f"duplicates unknown: the merger evicted {evicted} ids and may have re-emitted them"
        )
    failures = delivery_failures(data)
    if failures:
        notes.append(
            f"{failures} results were not written to the final topic (merger delivery "
            "failures): the output is not complete"
        )
    updates = data.spec.emits_updates
    if updates:
        notes += [
            "updates: windows and final values unknown from the merger's counters "
            "(the independent check or --recompute reads them)",
            FINAL_VALUES_HINT,
        ]
    return Correctness(
        basis="merger",
        expected=expected,
        results=results,
        missing=missing,
        duplicates=duplicates,
        divergent=divergent,
        produced=produced,
        notes=notes,
        delivery_failures=failures,
        updates=updates,
    )


def default(data: RunData) -> Correctness:
    """The run's correctness without services: the independent check deploy ran and wrote to
    ``check.json`` when it could model the pipeline, else the merger's counters."""
    base = from_merger(data)
    if data.check:
        return from_check(data.check, base)
    failed = next(
        (
            str(e.get("message"))
            for e in data.events(Event.WARNING)
            if e.get("kind") == CHECK_FAILED
        ),
        None,
    )
    if failed is None:
        return base
    # The check was meant to judge this run: the merger's own counts are no stand-in for it.
    return dataclasses.replace(
        base,
        missing=None,
        notes=[
            f"complete unknown: {failed}; 'arfl report --check' runs it again "
            f"(the merger's counts: {base.results} results)",
            *base.notes,
        ],
    )


def from_check(doc: Mapping[str, object], base: Correctness) -> Correctness:
    """Correctness from an independent check (``check.json`` or ``arfl report --check``).

    Args:
        doc: ``IndependentCheck.to_dict()``.
        base: the merger's counters (divergence between replicas, delivery failures,
            produced events).
    """
    if doc.get("unsupported"):
        return dataclasses.replace(
            base, notes=[*base.notes, f"independent check: {doc['unsupported']}"]
        )
    wrong = try_int(doc.get("wrong"))
    notes = [
        "basis independent: results recomputed from the input topic without Spark and "
        "compared with the final output (docs/correctness.md)",
        f"{doc.get('wrong')} delivered results differ from the recomputation; "
        f"{doc.get('extra')} result ids the input does not explain; "
        f"{doc.get('unreadable') or 0} unreadable output records",
    ]
    late, open_ = try_int(doc.get("late_windows")), try_int(doc.get("open_windows"))
    if late:
        notes.append(f"{late} windows with late rows not judged (Spark drops such rows)")
    if open_:
        notes.append(f"{open_} windows the final watermark never passed (not required)")
    examples = doc.get("examples")
    if isinstance(examples, dict):
        for kind in ("missing", "wrong", "extra", "duplicates", "final_values_wrong"):
            shown = examples.get(kind)
            if shown:
                notes.append(f"{kind}, e.g.: {str(shown[:3])[:300]}")
    # The check reports windows (possibly 0) exactly when the pipeline emits updates.
    updates = base.updates or doc.get("windows") is not None
    windows, final_checked, final_wrong = (
        try_int(doc.get(k)) if updates else None
        for k in ("windows", "final_values_checked", "final_values_wrong")
    )
    if updates:
        notes += _updates_notes(windows, final_checked, final_wrong)
    return Correctness(
        basis="independent",
        expected=try_int(doc.get("expected")),
        results=try_int(doc.get("results")),
        missing=try_int(doc.get("missing")),
        duplicates=try_int(doc.get("duplicates")),
        divergent=None if wrong is None else (base.divergent or 0) + wrong,
        produced=base.produced,
        notes=notes,
        delivery_failures=base.delivery_failures,
        extra=try_int(doc.get("extra")),
        updates=updates,
        windows=windows,
        final_values_checked=final_checked,
        final_values_wrong=final_wrong,
    )


def delivery_failures(data: RunData) -> int | None:
    """Results the merger failed to write to the final topic: ``merger.json``'s count, or
    unknown when the merger did not finish (no count, or it exited with an error the journal
    recorded)."""
    merged = data.merger or dict(data.summary.get("merger") or {})
    failures = try_int(merged.get("delivery_failures"))
    exited = data.first_event(Event.MERGER_EXITED)
    if exited is not None and try_int(exited.get("exit_code")) not in (0, None) and not failures:
        return None
    return failures


def compare_results(
    expected: Mapping[str, Result],
    final: Iterable[str],
    delivered: Iterable[Result],
    merger_divergent: int,
    produced: int | None,
    updates: bool = False,
) -> Correctness:
    """Correctness of the sink's records against a recomputation.

    Args:
        expected: rid -> the recomputed result.
        final: rids every complete run must have delivered (windows still open at the end of
            the input are not required).
        delivered: every record read from the sink topic.
        merger_divergent: copies the merger found divergent between replicas.
        produced: input events produced.
        updates: the run emits window updates: also compare each window's last delivered
            update with the final value among the ``final`` results (``Correctness.updates``
            and the final-value counts set).
    """
    records = list(delivered)
    seen: Counter[str] = Counter()
    wrong: set[str] = set()
    unexpected: set[str] = set()
    # Any copy whose content differs from the recomputation makes its result id wrong.
    for r in records:
        seen[r.rid] += 1
        want = expected.get(r.rid)
        if want is None:
            unexpected.add(r.rid)
        elif want.hash != r.hash:
            wrong.add(r.rid)
    final_set = set(final)
    missing = len(final_set - set(seen))
    duplicates = sum(n - 1 for n in seen.values())
    notes = [
        f"{len(expected)} results recomputed, {len(final_set)} of them final at the end of input",
        f"{len(wrong)} delivered results differ from the recomputation",
    ]
    if unexpected:
        notes.append(f"{len(unexpected)} delivered result ids are not in the recomputation")
    windows = final_checked = final_wrong = None
    if updates:
        final_want = final_values(expected[rid] for rid in final_set if rid in expected)
        final_got = final_values(records)
        windows = len(final_got)
        if final_set and not final_want:
            notes += [
                "updates: the recomputation holds no update ids; final values not checked",
                FINAL_VALUES_HINT,
            ]
        else:
            final_checked = len(final_want)
            final_wrong = sum(
                1
                for window, w in final_want.items()
                if (g := final_got.get(window)) is None or g.rid != w.rid or g.hash != w.hash
            )
            notes += _updates_notes(windows, final_checked, final_wrong)
    return Correctness(
        basis="recomputed",
        expected=len(final_set),
        results=len(seen),
        missing=missing,
        duplicates=duplicates,
        divergent=merger_divergent + len(wrong),
        produced=produced,
        notes=notes,
        updates=updates,
        windows=windows,
        final_values_checked=final_checked,
        final_values_wrong=final_wrong,
    )


def read_topic(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[Result]:
    """Every parseable result record of ``topic``, from its start to its current end.

    Raises:
        ReportError: Kafka is not reachable, the topic does not exist, or its end was not
            reached within ``timeout_s``.
    """
    from arfl.stack.topics import read_to_end

    out: list[Result] = []
    for msg in read_to_end(
        bootstrap, topic, error=ReportError, timeout_s=timeout_s, group_prefix="arfl-report",
        missing_hint="was it deleted? drop --recompute",
        unreachable_hint="start the run's stack ('arfl stack up') or drop --recompute",
    ):  # fmt: skip
        with contextlib.suppress(BadRecord):
            out.append(parse_result(msg.value()))
    return out


def recomputed(data: RunData) -> Correctness:
    """Correctness by recomputation (starts a local Spark batch job; see the module docstring).

    Raises:
        ReportError: the run's Kafka, topics or Spark connector are not available.
    """
    from arfl import stack
    from arfl.replica.offline import recompute

    started = data.first_event(Event.RUN_STARTED) or {}
    bootstrap = started.get("kafka")
    source = started.get("source_topic")
    sink = started.get("sink_topic")
    if not (bootstrap and source and sink):
        raise ReportError(
            f"{data.root}/journal.jsonl has no run-started event with kafka and topic names; "
            "cannot recompute"
        )
    spec = data.spec.model_copy(
        update={
            "source": data.spec.source.model_copy(update={"topic": str(source)}),
            "sink": data.spec.sink.model_copy(update={"topic": str(sink)}),
        }
    )
    delivered = read_topic(str(bootstrap), str(sink))
    try:
        jars = stack.ensure_installed().spark_kafka_jars
        rec = recompute(spec, str(bootstrap), jars)
    except ArflError as e:
        raise ReportError(f"offline recomputation of {data.name} failed: {e}") from e
    base = from_merger(data)
    checked = compare_results(
        rec.results, rec.final, delivered, base.divergent or 0, base.produced,
        updates=data.spec.emits_updates,
    )  # fmt: skip
    return dataclasses.replace(checked, delivery_failures=base.delivery_failures)
