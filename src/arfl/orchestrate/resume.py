"""Where a restarted replica starts reading (``replication.resume``): its own checkpoint, a copy
of the freshest committed checkpoint of any replica (``peer``), a fresh checkpoint at the
output frontier (``output``), or a fresh checkpoint at a recent window's first events
(``window``, :mod:`.window_resume`; a peer's checkpoint where none can be placed). The
supervisor asks :func:`plan_resume` at every restart and applies the answer (:class:`Resume`);
nothing here starts or stops a process."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from arfl.configs.spec import Spec
from arfl.measure import frontier as frontier_file
from arfl.orchestrate import checkpoints, window_resume
from arfl.run.rundir import RunPaths


@dataclass(frozen=True)
class Resume:
    """A restart's reading position.

    Attributes:
        checkpoint: the replica's checkpoint from now on (None: keep the one it has).
        start_offsets: the ``startingOffsets`` of a fresh checkpoint's first query.
        journal: the fields the restart's journal event carries (``resume``, and why or
            from where).
    """

    checkpoint: Path | None = None
    start_offsets: str | None = None
    journal: dict[str, object] = field(default_factory=dict)


def resume_offsets(
    starting: str | None, frontier: dict[int, int] | None
) -> dict[str, dict[str, int]] | None:
    """Spark ``startingOffsets`` at the output frontier: deploy's explicit start offsets
    (``{"topic": {"0": n, ...}}``) moved up to the frontier, partition by partition; None when
    either is unknown or the frontier lacks one of the partitions (the replica then resumes
    from its checkpoint)."""
    if starting is None or frontier is None:
        return None
    try:
        parsed = json.loads(starting)
        [(topic, start)] = parsed.items()
        start_at = {int(p): int(o) for p, o in start.items()}
    except (ValueError, AttributeError, TypeError):
        return None
    if not start_at or any(p not in frontier for p in start_at):
        return None
    return {topic: {str(p): max(o, frontier[p]) for p, o in sorted(start_at.items())}}


def plan_resume(
    spec: Spec,
    run_dir: Path,
    replica: int,
    attempt: int,
    checkpoints_now: Mapping[int, Path],
    starting_offsets: str | None,
    place: window_resume.PlaceStart | None = None,
) -> Resume:
    """Where replica ``replica``'s attempt ``attempt`` starts reading.

    Args:
        spec: the run's spec (``replication.resume`` and what the pipeline allows).
        run_dir: the run directory (the frontier file, the checkpoints' home).
        replica: the replica that restarts.
        attempt: its new attempt's number (a fresh checkpoint is named after it).
        checkpoints_now: every replica's current checkpoint location.
        starting_offsets: deploy's explicit start offsets (``startingOffsets`` JSON), if any.
        place: places a start at a window (the supervisor's :class:`.window_resume.Placer`;
            None: no Kafka to place it with).
    """
    fresh = run_dir / "checkpoints" / f"replica-{replica}.{attempt}"
    if spec.resumes_from_window_start:
        placed = _at_window_start(
            spec, run_dir, replica, fresh, starting_offsets, len(checkpoints_now), place
        )
        if isinstance(placed, Resume):
            return placed
        peer = _from_peer(replica, fresh, checkpoints_now)
        return replace(peer, journal={**peer.journal, "why": f"no window start: {placed}"})
    if spec.resumes_from_peer:
        return _from_peer(replica, fresh, checkpoints_now)
    if not spec.resumes_from_output:
        return Resume(journal={"resume": "checkpoint"})
    frontier = frontier_file.read_frontier(frontier_file.path_in(run_dir))
    offsets = resume_offsets(starting_offsets, frontier)
    if offsets is None:
        return Resume(
            journal={
                "resume": "checkpoint",
                "why": "no output frontier for every input partition yet",
            }
        )
    [per_partition] = offsets.values()
    return Resume(
        checkpoint=fresh,
        start_offsets=json.dumps(offsets),
        journal={"resume": "output", "offsets": per_partition},
    )


def _at_window_start(
    spec: Spec,
    run_dir: Path,
    replica: int,
    fresh: Path,
    starting_offsets: str | None,
    replicas: int,
    place: window_resume.PlaceStart | None,
) -> Resume | str:
    """A fresh checkpoint at a window boundary's first events (:mod:`.window_resume`), or why
    none could be placed."""
    window, event_time = spec.window, spec.source.event_time
    if place is None or starting_offsets is None or window is None or event_time is None:
        return "no Kafka or start offsets to place it with"
    try:
        [(topic, floors)] = json.loads(starting_offsets).items()
        floor_at = {int(p): int(o) for p, o in floors.items()}
    except (ValueError, AttributeError, TypeError):
        return "deploy's start offsets are not explicit"
    others = [r for r in range(replicas) if r != replica]
    started = time.monotonic()
    placed = place(
        topic,
        floor_at,
        event_time,
        round(float(window.size) * 1000),
        window_resume.newest_results(RunPaths(run_dir).monitor, others),
    )
    if isinstance(placed, str):
        return placed
    shutil.rmtree(fresh, ignore_errors=True)
    offsets = {topic: {str(p): o for p, o in sorted(placed.offsets.items())}}
    return Resume(
        checkpoint=fresh,
        start_offsets=json.dumps(offsets),
        journal={
            "resume": "window",
            "window_start": placed.start_ms,
            "offsets": offsets[topic],
            "replay": {str(p): n for p, n in placed.replay.items()},
            "place_s": round(time.monotonic() - started, 3),
        },
    )


def _from_peer(replica: int, dest: Path, checkpoints_now: Mapping[int, Path]) -> Resume:
    """A copy of the freshest committed checkpoint of any replica when it is another's
    (:mod:`arfl.orchestrate.checkpoints`); else the replica keeps its own."""
    own = checkpoints_now[replica]
    where = {loc: r for r, loc in checkpoints_now.items() if r != replica} | {own: replica}
    mine = checkpoints.last_committed(own)
    best = checkpoints.freshest(
        [mine, *(checkpoints.last_committed(loc) for loc in where if loc != own)]
    )
    if best is None or best.path == own:
        return Resume(journal={"resume": "checkpoint"})
    shutil.rmtree(dest, ignore_errors=True)
    started = time.monotonic()
    try:
        files = checkpoints.copy_committed(best, dest, metadata_from=own)
    except Exception as e:  # never the supervision thread's end: its own checkpoint is there
        shutil.rmtree(dest, ignore_errors=True)
        return Resume(journal={"resume": "checkpoint", "why": f"cannot copy {best.path}: {e}"})
    [per_partition] = best.offsets.values()
    return Resume(
        checkpoint=dest,
        journal={
            "resume": "peer",
            "peer": where[best.path],
            "batch": best.batch,
            "own_batch": None if mine is None else mine.batch,
            "offsets": per_partition,
            "ahead": None if mine is None else best.records - mine.records,
            "copied_files": files,
            "copy_s": round(time.monotonic() - started, 3),
        },
    )
