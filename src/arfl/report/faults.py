"""Faults as the journal recorded them: injection, revert, and the system's reaction.

The chaos runner writes ``fault-injected`` (``started`` = epoch seconds when the injection
began) and ``fault-reverted`` (``ended``) per fault, or ``fault-failed``; the replica runner
writes ``replica-died`` / ``replica-restarted`` / ``replica-ready``; ``kill-executor``'s revert
waits for the replacement executor and records ``details.replacement_s``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arfl.coerce import try_float, try_int
from arfl.registry import FAULTS
from arfl.report.rundata import Batch
from arfl.run.events import Event


def kills(kind: str) -> str | None:
    """What a fault of ``kind`` kills (:attr:`arfl.registry.FaultInfo.kills`; None for a kind
    this arfl does not know, from another version's journal)."""
    return FAULTS.info(kind).kills if kind in FAULTS else None


@dataclass(frozen=True)
class JournaledFault:
    """One fault from the journal, with the times the report needs (epoch seconds).

    Attributes:
        kind: the fault kind.
        replica: the replica it hit (None when unknown).
        started: when the injection began (None for a failed fault).
        window_end: end of the fault window: the revert for faults with a duration; for kills
            of a replica, the end of its first micro-batch after the restart (else its
            ``replica-ready``); for ``kill-executor`` the replacement; else the revert's end.
        duration_s: the requested duration (None for instant faults).
        detect_s: injection until the system noticed (``replica-died``; for ``kill-executor``
            the replacement executor).
        restored_s: injection until the replica / executor ran again or the fault was lifted.
        first_batch_s: for kills of a replica, injection until the restarted replica finished
            its first micro-batch (``progress/replica-N.jsonl``); None when unknown.
        lifted: when the fault stopped acting on the replica (see :func:`lifted_at`); None for
            a killed replica that never came back (and a failed fault).
        description: the chaos runner's description.
        error: ``fault-failed``'s error.
    """

    kind: str
    replica: int | None
    started: float | None
    window_end: float | None
    duration_s: float | None
    detect_s: float | None
    restored_s: float | None
    description: str
    error: str | None = None
    first_batch_s: float | None = None
    lifted: float | None = None
    killed: str | None = None
    """What the journal saw a kill on a replica kill (``its driver``, ``an executor``); None
    when it saw no death (or the fault kills no part of a replica)."""


def journaled_faults(
    journal: list[dict[str, Any]], batches: Mapping[int, Sequence[Batch]] | None = None
) -> list[JournaledFault]:
    """Every fault in a journal, in order of injection (failed ones last in journal order).

    Args:
        journal: the run's events.
        batches: replica -> its micro-batches, to find a killed replica's first batch after
            its restart.
    """
    injected = [e for e in journal if e.get("event") == Event.FAULT_INJECTED]
    reverted = [e for e in journal if e.get("event") == Event.FAULT_REVERTED]
    used: set[int] = set()
    out: list[JournaledFault] = []
    for inj in sorted(injected, key=lambda e: float(e.get("started") or e["t"])):
        started = float(inj.get("started") or inj["t"])
        kind = str(inj.get("kind"))
        replica = try_int(inj.get("replica"))
        rev: dict[str, Any] | None = None
        for i, r in enumerate(reverted):
            if i in used or r.get("kind") != kind or try_int(r.get("replica")) != replica:
                continue
            if float(r.get("started") or r["t"]) >= started - 1e-3:
                used.add(i)
                rev = r
                break
        out.append(_react(journal, inj, rev, kind, replica, started, batches or {}))
    for e in journal:
        if e.get("event") == Event.FAULT_FAILED:
            out.append(
                JournaledFault(
                    kind=str(e.get("kind")),
                    replica=try_int(e.get("replica")),
                    started=None,
                    window_end=None,
                    duration_s=None,
                    detect_s=None,
                    restored_s=None,
                    description=str(e.get("kind")),
                    error=str(e.get("error")),
                )
            )
    return out


def _react(
    journal: list[dict[str, Any]],
    inj: dict[str, Any],
    rev: dict[str, Any] | None,
    kind: str,
    replica: int | None,
    started: float,
    batches: Mapping[int, Sequence[Batch]],
) -> JournaledFault:
    duration = try_float(inj.get("duration_s"))
    rev_end = None if rev is None else try_float(rev.get("ended") or rev.get("t"))
    died_seen = False
    killed: str | None = None
    detect: float | None = None
    restored: float | None = None
    first_batch: float | None = None
    if kills(kind) == "replica" and replica is not None:
        died = next(
            (
                e
                for e in journal
                if e.get("event") == Event.REPLICA_DIED
                and try_int(e.get("replica")) == replica
                and float(e["t"]) >= started - 0.5
            ),
            None,
        )
        if died is not None:
            died_seen, killed = True, "its driver"
            detect = max(0.0, float(died["t"]) - started)
            ready = next(
                (
                    e
                    for e in journal
                    if e.get("event") in (Event.REPLICA_READY,)
                    and try_int(e.get("replica")) == replica
                    and float(e["t"]) > float(died["t"])
                ),
                None,
            )
            if ready is not None:
                restored = float(ready["t"]) - started
            # The restarted driver's first batch: when the replica delivers again.
            after = [b for b in batches.get(replica, ()) if b.start > float(died["t"])]
            if after:
                first_batch = after[0].end - started
    elif kills(kind) == "merger":
        died_at = _first(journal, Event.MERGER_DIED, started - 0.5)
        took = next(
            (e for e in journal
             if e.get("event") == Event.MERGER_TOOK_OVER and float(e["t"]) >= started - 0.5),
            None,
        )  # fmt: skip
        if took is not None:  # a standby took over (before the watch saw the death, often)
            died_seen = True
            detect = max(0.0, float(took["detected"]) - started)
            restored = float(took["t"]) - started
        elif died_at is not None:
            died_seen = True
            detect = max(0.0, died_at - started)
            back = _first(journal, Event.MERGER_RECOVERED, died_at)
            if back is not None:
                restored = back - started
    elif kills(kind) == "executor":
        details = (rev or {}).get("details") or inj.get("details") or {}
        replaced = try_float(details.get("replacement_s"))
        detect = restored = replaced
        killed = None if replaced is None else "an executor"
    elif rev_end is not None:
        restored = rev_end - started
    takes_duration = FAULTS.info(kind).takes_duration if kind in FAULTS else bool(duration)
    if takes_duration:
        window_end = rev_end if rev_end is not None else started + (duration or 0.0)
    elif first_batch is not None:
        window_end = started + first_batch
    elif restored is not None:
        window_end = started + restored
    else:
        window_end = rev_end if rev_end is not None else started
    return JournaledFault(
        kind=kind,
        replica=replica,
        started=started,
        window_end=max(window_end, started),
        duration_s=duration,
        detect_s=detect,
        restored_s=restored,
        description=str(inj.get("description") or kind),
        first_batch_s=first_batch,
        lifted=lifted_at(kind, started, died_seen, restored, rev_end, takes_duration, duration),
        killed=killed,
    )


def _first(journal: list[dict[str, Any]], event: Event, after: float) -> float | None:
    """When ``event`` was first journaled at or after ``after`` (epoch seconds)."""
    return next(
        (float(e["t"]) for e in journal if e.get("event") == event and float(e["t"]) >= after), None
    )


def lifted_at(
    kind: str,
    started: float,
    died: bool,
    restored_s: float | None,
    reverted: float | None,
    takes_duration: bool,
    duration_s: float | None,
) -> float | None:
    """When a fault stopped acting on its replica, the moment from which input the replica
    processes shows whether it is healthy again (:func:`arfl.report.verdicts.healthy_at`).

    * a killed replica: when it was ready again after dying (None: it never came back);
    * a killed executor: when its replacement ran;
    * a killed merger: when a standby or a new one took over (None: none did);
    * a fault with a duration: its revert (else the requested end);
    * otherwise, or when the journal says nothing more: the injection.

    Results computed by a dying replica (a killed driver's executors write for a few more
    milliseconds) or in flight at a pause come from input sent before this moment, so they
    never count as health.
    """
    if kills(kind) in ("replica", "merger") and died:
        return None if restored_s is None else started + restored_s
    if kills(kind) == "executor" and restored_s is not None:
        return started + restored_s
    if takes_duration:
        if reverted is not None:
            return max(started, reverted)
        return started + (duration_s or 0.0)
    return started
