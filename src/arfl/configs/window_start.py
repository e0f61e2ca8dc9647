"""When a restarted windowed replica may start at the start of a window instead of a checkpoint
(``replication.resume = "window"``, and ``auto`` where this allows it).

A tumbling window's results depend on the events of that window only. Where each input
partition's event times never go back (arfl's generated input: the event time is the intended
send time, or a declared ``event-time`` field without disorder or late events) and a key lives
in one partition (``active`` groups by ``source.key``), a fresh query that starts every partition
at its first event of time ``S`` or later (``S`` a window boundary) reads every event of every
window from ``S`` on, in the order every replica reads it, and no event of an earlier one: its
results (each update ``#n`` too) are the other replicas' copies, and it replays ~a window and a
second instead of up to interval / R from a peer's checkpoint (docs/design.md §2.6, "Resuming
at a window's start"). The rule is stated once here over plain values, so that a parsed spec
(:attr:`arfl.configs.spec.Spec.resumes_from_window_start`) and a raw one
(:func:`arfl.configs.masking.chosen_defaults`, before validation) agree.
"""

from __future__ import annotations

from collections.abc import Sequence

WINDOW_START_MAX_S = 10.0
"""The longest tumbling window that resumes at its start: the replay is up to a window and
:data:`WINDOW_START_MARGIN_MS` long, which past this is no shorter than a peer's checkpoint at the
interval arfl sets (docs/benchmarks.md, "P(masked)")."""
WINDOW_START_MARGIN_MS = 1_000
"""How far behind the input's newest event (and every other replica's newest result) the start
is placed: events that far back are in every partition's past, whatever order the partitions'
producers wrote them in."""


def window_start_blocker(
    step_kinds: Sequence[str],
    window_size_s: float | None,
    window_slide_s: float | None,
    *,
    replayed: bool,
    event_time: str | None,
    event_time_kind: str | None,
    declared_fields: bool,
    disorder_s: float,
    late: float,
) -> str | None:
    """Why the pipeline cannot resume at a window's start; None when it can.

    Args:
        step_kinds: each step's kind (``filter``, ``select``, ``window``, ``transform``).
        window_size_s: the window step's size; window_slide_s: its slide (None: tumbling).
        replayed: the input replays an existing topic (``source.replay``).
        event_time: ``source.event_time``; event_time_kind: that field's declared kind (None:
            not declared).
        declared_fields: the workload declares its fields (``[workload.fields]``).
        disorder_s: ``workload.disorder``; late: ``workload.late``.
    """
    if step_kinds.count("window") != 1 or window_size_s is None:
        return "the pipeline has no single window step"
    other = sorted({k for k in step_kinds if k not in ("filter", "select", "window")})
    if other:
        return f"a {other[0]} step may keep state of its own"
    if window_slide_s is not None and window_slide_s != window_size_s:
        return "a sliding window shares events with the windows before it"
    if window_size_s > WINDOW_START_MAX_S:
        return f"a window longer than {WINDOW_START_MAX_S:g} s replays no less than a checkpoint"
    if replayed:
        return "replayed input's event times may go back"
    if declared_fields:
        if event_time_kind != "event-time":
            return f"source.event_time {event_time!r} is not a declared event-time field"
    elif event_time != "ts":
        return f"source.event_time {event_time!r} is not the generated send time 'ts'"
    if disorder_s > 0 or late > 0:
        return "workload.disorder or workload.late sends event times back"
    return None
