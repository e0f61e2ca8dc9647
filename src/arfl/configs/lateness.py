"""When a generated event is late: the one definition the generator, the offline recomputation
and the independent check share (:func:`late_lag_ms`, :func:`late_from_seq`, :func:`is_late`)."""

from __future__ import annotations

import math

from arfl.configs.spec import Spec

LATE_MARGIN_S = 1.0
"""Safety margin of :func:`late_lag_ms` (rounding of window bounds, millisecond event times)."""


def late_lag_ms(spec: Spec) -> int | None:
    """**The one definition of "late"** that the generator, the offline recomputation and the
    independent check share: a generated late event's time lies this much (plus up to
    ``disorder``) before the run's *first* intended send time ``t0``; an event is late when
    ``ts - event time >= late_lag_ms`` (an on-time event lags by at most ``disorder``, below it;
    a late one by at least ``ts - t0 + late_lag_ms``).

    Why that is behind Spark's watermark whatever the batch sizes: Spark drops a row from a
    window when the window's end is at or before the batch's watermark, which is the newest
    event time of *earlier* batches minus the window's ``watermark`` delay (0 before the first
    batch with data). Every event that reaches the window has an event time of at least
    ``t0 - disorder``, so once one batch with data has run the watermark is at least
    ``t0 - disorder - delay``. A late row's windows end at most ``size`` after its event time,
    ``t0 - late_lag_ms - jitter + size <= t0 - disorder - delay - margin``: before it. A lag
    measured from the event's own send time would need every batch to be short (under load a
    first batch can span the whole run); this one only needs the first batch with data to run
    before late events arrive, so they start after the warm-up (:func:`late_from_seq`).

    Without a window step (no watermark, nothing is dropped) the lag is
    ``disorder + margin``: late events are still generated, and kept by the pipeline.

    Returns:
        The lag in ms, or None when the workload has no late events (``late = 0`` or no
        event-time field).
    """
    if not spec.workload.late or spec.workload.event_time_field() is None:
        return None
    window = spec.window
    held = window.size + window.watermark if window is not None else 0.0
    return round(1000 * (held + spec.workload.disorder + LATE_MARGIN_S))


def late_from_seq(spec: Spec) -> int:
    """The first event that may be late: the first one due after the warm-up (by then the
    replicas have run a batch with data, whose events set the watermark); an automatic
    warm-up is not known before the run, so its floor."""
    wl = spec.workload
    return math.ceil(wl.least_warmup_s * wl.rate)


def is_late(ts_ms: int, event_ms: int, lag_ms: int | None) -> bool:
    """Whether an event is late by :func:`late_lag_ms` (always False without a lag)."""
    return lag_ms is not None and ts_ms - event_ms >= lag_ms
