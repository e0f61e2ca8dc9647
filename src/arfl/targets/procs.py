"""Process helpers shared by the signal-based faults: pids with their create time, so a pid
reused after a restart is never signalled by mistake."""

from __future__ import annotations

import os
import signal
import time

import psutil

from arfl.errors import FaultError
from arfl.processes import ProcessId, wait_until


def identify(pids: list[int]) -> list[list[float]]:
    """Each pid still alive as its JSON identity ``[pid, create_time]`` (:class:`ProcessId`)."""
    found = (ProcessId.of(pid) for pid in pids)
    return [p.to_pair() for p in found if p is not None]


def send(records: list[list[float]], sig: signal.Signals) -> list[int]:
    """Send ``sig`` to each recorded process that is still the one recorded; returns the pids
    signalled."""
    done: list[int] = []
    for rec in records:
        if not ProcessId.from_pair(rec).alive():
            continue
        try:
            os.kill(int(rec[0]), sig)
            done.append(int(rec[0]))
        except ProcessLookupError:
            continue
    return done


def wait_status(pids: list[int], want_stopped: bool, timeout_s: float = 5.0) -> float | None:
    """Wait until every pid is stopped (``T``) or, with ``want_stopped=False``, none is.

    Returns:
        Seconds waited, or None on timeout.
    """

    def settled() -> bool:
        for pid in pids:
            try:
                stopped = psutil.Process(pid).status() == psutil.STATUS_STOPPED
            except psutil.NoSuchProcess:
                continue
            if stopped != want_stopped:
                return False
        return True

    t0 = time.monotonic()
    try:
        wait_until(settled, timeout_s=timeout_s, interval_s=0.002)
    except TimeoutError:
        return None
    return time.monotonic() - t0


def kill(pid: int, what: str) -> None:
    """SIGKILL ``pid`` (``what``: how an error names it, e.g. ``executor``).

    Raises:
        FaultError: it was gone already.
    """
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError as e:
        raise FaultError(f"{what} pid {pid} vanished before the kill") from e
