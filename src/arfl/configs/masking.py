"""What a spec needs to mask a fault on real-time mode: the defaults arfl chooses for it, and
why a spec will likely not mask (``arfl validate``).

A coordination-free replica set on Spark's real-time mode masks a kill when the killed
replica is back before a survivor's batch boundary stalls the output alone (docs/design.md
§2.6, "Masking defaults"). Two settings carry that, so arfl sets them where the user did not
(:func:`chosen_defaults`, applied to the raw spec before validation so that every reader of the
spec, the run directory's ``spec.json`` included, sees the same values):

* ``replication.standby = 1``: a warm spare driver takes a killed replica's place in seconds
  instead of a new Spark application's 20-40 s. Only where a standby can run (a local master,
  restarts on, no network fault on the local target). A take-over uses the spare up, and its
  successor is warm only ~65-75 s later on a loaded host, so a spec whose kills come closer than
  :data:`STANDBY_READY_S` gets one spare per kill in such a stretch (:func:`standbys_needed`).
* ``replication.trigger_interval``: a survivor's boundary then comes every 60 s (a stateless
  pipeline, or one tumbling window on generated input) or 30 s (any other) instead of every
  5 s. A stateless pipeline resumes at the output frontier and replays nothing, a tumbling
  window at a recent window's start (:mod:`arfl.configs.window_start`) and replays about a
  window, so the longer interval costs them nothing and leaves fewer boundaries for a catch-up
  to meet; any other replays at most interval / R from a peer's checkpoint, so its interval is
  the one its kills were measured masked at.

P(masked) with and without them: docs/benchmarks.md, "P(masked)".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arfl.configs.realtime import REALTIME, RTM_MIN_BATCH_S
from arfl.configs.window_start import window_start_blocker
from arfl.registry import FAULTS, MODES
from arfl.units import format_duration, parse_duration

if TYPE_CHECKING:
    from arfl.configs.spec import Spec

MASKING_RATE_PER_CORE = 500
"""Input events a second per host core at which two real-time replicas still kept p99 under
100 ms on a 2-core host (1,000 ev/s; 2,500 saturated it: docs/benchmarks.md, "The replicas'
sink batches for 5 ms"): above it a fault's extra work has no CPU to run on."""
MASKING_INTERVAL_S = 30.0
"""The real-time interval arfl chooses for a coordination-free replica set that keeps state, and
the shortest it does not warn about: a survivor's boundary (~0.3-1.4 s of stall) then rarely
falls inside a newcomer's catch-up (docs/benchmarks.md, "P(masked)")."""
STATELESS_INTERVAL_S = 60.0
"""The real-time interval arfl chooses for a stateless one that resumes at the output frontier
(and for one that resumes at a window's start, which replays about a window): nothing is
replayed, so only the share of each interval where a catch-up meets the survivor's boundary
counts, and it halves against 30 s (no kill in twenty met it at 60 s, two did at 30 s:
docs/benchmarks.md, "P(masked)")."""


STANDBY_READY_S = 80.0
"""How long after a take-over the next spare driver is warm, rounded up: the supervisor starts
it 20 s later (``orchestrate/standbys.STANDBY_RESPAWN_DELAY_S``, so that its start does not
compete with the catch-up) and it was ready 45-52 s after that on a host carrying two real-time
replicas at 1,500 ev/s (docs/benchmarks.md, "Two kills closer than a standby's start"). A
second kill sooner than this finds no warm spare unless the spec keeps two."""
MAX_STANDBY = 4
"""``replication.standby``'s upper bound (:class:`arfl.configs.spec.Replication` uses it)."""


def kill_span(at: float, after_boundary: float | None, interval: float) -> tuple[float, float]:
    """When a kill at ``at`` can fall: then, or with ``after_boundary`` up to an interval (the
    wait for a batch boundary) and that wait later."""
    return (at, at if after_boundary is None else at + interval + after_boundary)


def standbys_needed(kills: list[tuple[float, float]]) -> int:
    """The spares a spec's kills need: the most kills that can fall inside one
    :data:`STANDBY_READY_S` (at least 1, at most :data:`MAX_STANDBY`); each kill is its
    :func:`kill_span`."""
    spans = sorted(kills)
    most = 1
    for i, (_, latest) in enumerate(spans):
        inside = sum(1 for earliest, _ in spans[i:] if earliest - latest < STANDBY_READY_S)
        most = max(most, inside)
    return min(most, MAX_STANDBY)


def _kill_spans(raw: dict[str, Any]) -> list[tuple[float, float]]:
    """When each kill among a raw spec's ``[[chaos]]`` entries can fall (:func:`standbys_needed`);
    entries that are malformed are left to their own error."""
    chaos = raw.get("chaos")
    repl = raw.get("replication") if isinstance(raw.get("replication"), dict) else {}
    assert isinstance(repl, dict)
    try:
        interval = parse_duration(repl.get("trigger_interval"))
    except ValueError:
        interval = STATELESS_INTERVAL_S  # unset: at most the longest arfl chooses
    out: list[tuple[float, float]] = []
    for c in chaos if isinstance(chaos, list) else []:
        if not isinstance(c, dict) or c.get("fault") not in FAULTS:
            continue
        if FAULTS.info(str(c["fault"])).kills not in ("replica", "executor"):
            continue
        try:
            at = parse_duration(c.get("at"))
            wait = parse_duration(c["after_boundary"]) if "after_boundary" in c else None
        except ValueError:
            continue
        out.append(kill_span(at, wait, interval))
    return out


@dataclass(frozen=True)
class Chosen:
    """A key the user did not write and arfl set so that the spec can mask a fault."""

    key: str
    value: Any
    why: str

    def describe(self) -> str:
        return f"{self.key} = {self.value!r} ({self.why})"


def chosen_defaults(raw: dict[str, Any]) -> list[Chosen]:
    """The masking defaults for a raw spec (module docstring); empty unless it replicates
    without coordination on real-time mode. A malformed section chooses nothing: its own
    problem is the one to report."""
    repl = raw.get("replication")
    if not isinstance(repl, dict) or repl.get("trigger") != REALTIME:
        return []
    mode = repl.get("mode")
    if not isinstance(mode, str) or mode not in MODES or not MODES.info(mode).coordination_free:
        return []
    out: list[Chosen] = []
    if "trigger_interval" not in repl:
        stateless = _resumes_from_output(raw)
        at_window = not stateless and _resumes_from_window_start(raw)
        interval = STATELESS_INTERVAL_S if stateless or at_window else MASKING_INTERVAL_S
        why = "a survivor's batch boundary rarely falls inside a killed replica's catch-up"
        if stateless:
            why += "; a stateless pipeline resumes at the output frontier and replays nothing"
        elif at_window:
            why += "; a restarted replica resumes at a recent window's start and replays ~a window"
        out.append(Chosen("replication.trigger_interval", f"{interval:g}s", why))
    if "standby" not in repl and _standby_allowed(raw):
        needed = standbys_needed(_kill_spans(raw))
        why = (
            "a warm driver takes a killed replica's place in seconds, not a new "
            "application's 20-40 s"
        )
        if needed > 1:
            why += (
                f"; {needed} kills within {STANDBY_READY_S:g} s, sooner than a used spare's "
                "successor is warm: one spare each"
            )
        out.append(Chosen("replication.standby", needed, why))
    return out


def with_chosen_defaults(raw: dict[str, Any]) -> tuple[dict[str, Any], list[Chosen]]:
    """``raw`` with :func:`chosen_defaults` filled in (a new dict; ``raw`` is left alone)."""
    chosen = chosen_defaults(raw)
    if not chosen:
        return raw, []
    repl = dict(raw["replication"])
    for c in chosen:
        repl[c.key.split(".", 1)[1]] = c.value
    return {**raw, "replication": repl}, chosen


def _resumes_from_output(raw: dict[str, Any]) -> bool:
    """The raw spec's replicas resume at the output frontier (what
    :attr:`arfl.configs.spec.Spec.resumes_from_output` says of a parsed one): every step a
    filter or a select, and ``resume`` left out or ``auto``/``output``."""
    steps = raw.get("steps", [])
    mode = raw["replication"].get("mode")
    if not isinstance(steps, list) or not MODES.info(mode).resumes_from_peers:
        return False
    if raw["replication"].get("resume", "auto") not in ("auto", "output"):
        return False
    kinds = [
        {k for k, v in s.items() if v is not None} if isinstance(s, dict) else set() for s in steps
    ]
    return all(len(k) == 1 and k <= {"filter", "select"} for k in kinds)


def _resumes_from_window_start(raw: dict[str, Any]) -> bool:
    """The raw spec's replicas resume at a window's start (what
    :attr:`arfl.configs.spec.Spec.resumes_from_window_start` says of a parsed one)."""
    repl = raw["replication"]
    mode = repl.get("mode")
    if not MODES.info(mode).resumes_from_peers or repl.get("resume", "auto") not in (
        "auto",
        "window",
    ):
        return False
    return window_start_problem(raw) is None


def window_start_problem(raw: dict[str, Any]) -> str | None:
    """Why a raw spec's pipeline and input do not allow a resume at a window's start
    (:func:`arfl.configs.window_start.window_start_blocker`); None when they do. A malformed
    section is a reason too (its own problem is the one reported)."""
    steps, source, workload = raw.get("steps", []), raw.get("source", {}), raw.get("workload", {})
    if not (isinstance(steps, list) and isinstance(source, dict) and isinstance(workload, dict)):
        return "a malformed section"
    try:
        kinds = [next(k for k, v in s.items() if v is not None) for s in steps]
        windows = [s["window"] for s in steps if s.get("window") is not None]
        window = windows[0] if len(windows) == 1 else {}
        size = parse_duration(window["size"]) if "size" in window else None
        slide = parse_duration(window["slide"]) if window.get("slide") is not None else None
        fields = workload.get("fields") or {}
        event_time = source.get("event_time")
        decl = fields.get(event_time) if isinstance(event_time, str) else None
        return window_start_blocker(
            kinds,
            size,
            slide,
            replayed=source.get("replay") is not None,
            event_time=event_time,
            event_time_kind=decl.get("kind") if isinstance(decl, dict) else None,
            declared_fields=bool(fields),
            disorder_s=parse_duration(workload.get("disorder", "0s")),
            late=float(workload.get("late", 0)),
        )
    except (AttributeError, KeyError, StopIteration, TypeError, ValueError):
        return "a malformed step, window or workload"


def _standby_allowed(raw: dict[str, Any]) -> bool:
    """Whether ``replication.standby = 1`` would be accepted here (the spec's own standby rules,
    :func:`arfl.configs.checks.standby_problems`)."""
    from arfl.configs.checks import standby_problems

    repl = {**raw["replication"], "standby": 1}
    return not standby_problems({**raw, "replication": repl})


def masking_problems(spec: Spec, cores: int) -> list[str]:
    """Why ``spec``, which asks for masking (a kill among its faults, or ``slo.masked``), will
    most likely not get it on this host, each with what to set; empty when nothing stands out.
    Only replicated real-time specs (micro-batch stalls a batch at every boundary anyway)."""
    kills = [c for c in spec.chaos if FAULTS.info(c.fault).kills in ("replica", "executor")]
    asked = bool(kills) or spec.report.slo.get("masked") is True
    rep = spec.replication
    if not asked or rep.replicas < 2 or rep.trigger != REALTIME:
        return []
    out = []
    if rep.standby == 0:
        out.append(
            "replication.standby = 0: a killed replica comes back as a new Spark application "
            "(20-40 s here), and a survivor's batch boundary in that time stalls the output; "
            "set replication.standby = 1 (or leave it out: arfl sets it)"
        )
    interval = rep.trigger_interval or RTM_MIN_BATCH_S
    needed = standbys_needed([kill_span(c.at, c.after_boundary, interval) for c in kills])
    if 0 < rep.standby < needed:
        out.append(
            f"replication.standby = {rep.standby}: {needed} kills come within "
            f"{STANDBY_READY_S:g} s, and a spare used by one take-over has no warm successor "
            f"for ~65-75 s; set replication.standby = {needed} (or leave it out: arfl sets it), "
            f"or space the kills {STANDBY_READY_S:g} s or more apart"
        )
    if interval < MASKING_INTERVAL_S and not spec.has_window:
        fresh = spec.resumes_from_output or spec.resumes_from_window_start
        chosen = STATELESS_INTERVAL_S if fresh else MASKING_INTERVAL_S
        out.append(
            f"replication.trigger_interval {format_duration(interval)}: a survivor's boundary "
            "comes that often and falls inside a newcomer's catch-up (1.5-4 s) most of the "
            "time; a stateless pipeline resumes at the output frontier and replays nothing, so "
            f'set trigger_interval = "{chosen:g}s" (or leave it out: arfl sets it)'
        )
    limit = MASKING_RATE_PER_CORE * cores
    if spec.workload.rate * rep.replicas > limit * 2:
        out.append(
            f"workload.rate {spec.workload.rate:,} ev/s x {rep.replicas} replicas: above the "
            f"~{limit:,} ev/s that two real-time replicas carry on {cores} core"
            f"{'s' if cores != 1 else ''} with room for a fault; lower the rate"
        )
    return out
