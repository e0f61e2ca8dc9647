"""When a dead replica driver is restarted, and when it is given up.

A driver that keeps exiting by itself is not restarted forever: after ``crash_loop_limit``
deaths in a row before Spark came up, or more than ``crash_loop_restarts`` restarts within
``crash_loop_window_s`` (a query that fails after start-up), it is given up with reason
``crash-loop``. Deaths by a signal (a ``kill-replica`` fault, the OOM killer) do not count
towards the second limit: they are what chaos is made of, not a broken pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from arfl.orchestrate.slots import ReplicaSlot
from arfl.replica.driver import EXIT_BAD_CONFIG
from arfl.targets.local import restart_suppressed

CRASH_LOOP_LIMIT = 5
"""Deaths in a row before Spark came up after which a replica is given up."""
CRASH_LOOP_RESTARTS = 5
"""At most this many restarts of one replica within :data:`CRASH_LOOP_WINDOW_S` after exits
by itself (not by a signal); one more such exit gives it up as a crash loop."""
CRASH_LOOP_WINDOW_S = 300.0


@dataclass(frozen=True)
class RestartPolicy:
    """Attributes:
    restart: restart dead drivers at all (``replication.restart``).
    delay_s: pause before restarting a dead driver (a ready standby takes over at once).
    crash_loop_limit: give up after this many consecutive deaths before the driver
        reported an app id (a config or environment problem, not a crash to mask).
    crash_loop_restarts: at most this many restarts within ``crash_loop_window_s``
        after the driver exited by itself; one more exit gives it up.
    crash_loop_window_s: the window of ``crash_loop_restarts``.
    """

    restart: bool = True
    delay_s: float = 0.5
    crash_loop_limit: int = CRASH_LOOP_LIMIT
    crash_loop_restarts: int = CRASH_LOOP_RESTARTS
    crash_loop_window_s: float = CRASH_LOOP_WINDOW_S

    def died(self, rep: ReplicaSlot, code: int, now: float) -> None:
        """Count a death of ``rep``'s driver with exit ``code`` (negative: by a signal)."""
        if rep.state.status == "starting":
            rep.failures_without_app += 1
        if code >= 0:
            rep.exits = [t for t in rep.exits if now - t <= self.crash_loop_window_s] + [now]

    def give_up(self, rep: ReplicaSlot, code: int, run_dir: Path) -> tuple[str, str | None] | None:
        """Why a replica that just exited is not restarted (reason, detail), or None."""
        if not self.restart:
            return "replication.restart is false", None
        if restart_suppressed(run_dir, rep.index):
            # A 'kill-replica' fault with restart = false asked the supervisor to stand down.
            return "no-restart marker (fault)", None
        if code == EXIT_BAD_CONFIG:
            return f"the pipeline cannot be built (exit code {code}); see {rep.proc_log}", None
        if rep.failures_without_app >= self.crash_loop_limit:
            return "crash-loop", (
                f"died {rep.failures_without_app} times in a row before Spark was up; "
                f"see {rep.proc_log}"
            )
        if len(rep.exits) > self.crash_loop_restarts:
            return "crash-loop", (
                f"exited again (exit code {code}) after {len(rep.exits) - 1} restarts "
                f"within {self.crash_loop_window_s:.0f}s; see {rep.proc_log}"
            )
        return None
