"""Process helpers shared by the signal-based faults: pids with their create time, so a pid
reused after a restart is never signalled by mistake."""

from __future__ import annotations

import os
import signal
import time

import psutil

from arfl.processes import same_process as _same_process
from arfl.processes import wait_until

PidRecord = list[float]  # [pid, create_time] — JSON-friendly


def identify(pids: list[int]) -> list[PidRecord]:
    """``[pid, create_time]`` for each pid still alive."""
    out: list[PidRecord] = []
    for pid in pids:
        try:
            out.append([pid, psutil.Process(pid).create_time()])
        except psutil.NoSuchProcess:
            continue
    return out


def same_process(rec: PidRecord) -> bool:
    """True when ``rec``'s pid is alive and is still the process that was recorded."""
    return _same_process(int(rec[0]), rec[1], slack_s=0.5) is not None


def send(records: list[PidRecord], sig: signal.Signals) -> list[int]:
    """Send ``sig`` to each recorded process that still exists; returns the pids signalled."""
    done: list[int] = []
    for rec in records:
        if not same_process(rec):
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
