"""Requests to a running replica driver, through files in the run directory.

The driver answers each request file ``<id>.req.json`` in its control directory
(``<run>/control/replica-N``, :meth:`arfl.run.rundir.RunPaths.control`) with ``<id>.resp.json``;
what it can do is :class:`arfl.replica.control.SparkControl`'s. Files, not a socket: the run
directory is where the driver runs on every target (a docker replica mounts it at the host's
path), and nothing listens on the network.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arfl.errors import FaultError
from arfl.run.rundir import write_json_atomic

POLL_S = 0.1
"""How often the driver looks for requests (a listdir of an empty directory: negligible CPU)."""

REQUEST_SUFFIX = ".req.json"
RESPONSE_SUFFIX = ".resp.json"


def executor_order(executor: str) -> tuple[bool, int, str]:
    """Numeric ids in numeric order first (Spark's executor ids are ``0``, ``1``, ...)."""
    return (not executor.isdigit(), int(executor) if executor.isdigit() else 0, executor)


def serve(
    control_dir: Path,
    handle: Callable[[dict[str, Any]], dict[str, Any]],
    stop: threading.Event,
    *,
    poll_s: float = POLL_S,
) -> threading.Thread:
    """Answer requests in ``control_dir`` on a daemon thread until ``stop`` is set."""
    control_dir.mkdir(parents=True, exist_ok=True)

    def loop() -> None:
        while not stop.wait(poll_s):
            for req in sorted(control_dir.glob("*" + REQUEST_SUFFIX)):
                try:
                    request = json.loads(req.read_text(encoding="utf-8"))
                    req.unlink()
                except (OSError, ValueError):
                    continue  # half-written (requests are written atomically) or taken back
                answer = handle(request if isinstance(request, dict) else {})
                rid = req.name[: -len(REQUEST_SUFFIX)]
                write_json_atomic(control_dir / (rid + RESPONSE_SUFFIX), answer)

    t = threading.Thread(target=loop, name="arfl-control", daemon=True)
    t.start()
    return t


def ask(control_dir: Path, request: dict[str, Any], *, timeout_s: float = 15.0) -> dict[str, Any]:
    """Send ``request`` to the driver watching ``control_dir`` and wait for its answer.

    Raises:
        FaultError: no answer in time (the request is taken back), or the driver's error.
    """
    if not control_dir.is_dir():
        raise FaultError(
            f"{control_dir}: no control directory; the replica's driver has not started (or "
            "was started by an arfl without one)"
        )
    rid = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
    req = control_dir / (rid + REQUEST_SUFFIX)
    resp = control_dir / (rid + RESPONSE_SUFFIX)
    write_json_atomic(req, request)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if resp.exists():
            answer: dict[str, Any] = json.loads(resp.read_text(encoding="utf-8"))
            resp.unlink()
            if not answer.get("ok"):
                raise FaultError(f"{request.get('op')}: the driver answered: {answer.get('error')}")
            return answer
        time.sleep(0.02)
    try:
        os.unlink(req)
    except FileNotFoundError:  # taken by the driver just now: its late answer is dropped
        resp.unlink(missing_ok=True)
    raise FaultError(
        f"{request.get('op')}: the driver did not answer within {timeout_s:g} s ({control_dir}); "
        "is it running?"
    )
