"""Requests to a running replica driver, through files in the run directory.

The driver answers each request file ``<id>.req.json`` in its control directory
(``<run>/control/replica-N``, :meth:`arfl.run.rundir.RunPaths.control`) with ``<id>.resp.json``;
what it can do is :class:`arfl.replica.control.SparkControl`'s. Files, not a socket: the run
directory is where the driver runs on every target (a docker replica mounts it at the host's
path), and nothing listens on the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
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
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> threading.Thread:
    """Answer requests in ``control_dir`` on a daemon thread until ``stop`` is set.

    A request whose asker has given up (``expires``, wall-clock seconds, passed) is dropped
    unanswered: a kill asked for by an ``arfl`` that died meanwhile never happens later. A file
    system error is logged and the thread goes on: the driver's pipeline never depends on it.
    """

    def one(req: Path) -> None:
        try:
            request = json.loads(req.read_text(encoding="utf-8"))
            req.unlink()  # the claim: one server handles a request, once
        except (OSError, ValueError):
            return  # taken back by its asker
        try:
            expires = float(request.get("expires", 0)) if isinstance(request, dict) else 0.0
        except (TypeError, ValueError):
            expires = 0.0
        if expires < time.time():
            log(f"control: dropped an expired (or malformed) request {req.name}")
            return
        answer = handle(request)
        write_json_atomic(
            control_dir / (req.name[: -len(REQUEST_SUFFIX)] + RESPONSE_SUFFIX), answer
        )

    def loop() -> None:
        while not stop.wait(poll_s):
            try:
                for req in sorted(control_dir.glob("*" + REQUEST_SUFFIX)):
                    one(req)
            except OSError as e:
                log(f"control: {control_dir}: {e}")

    try:
        control_dir.mkdir(parents=True, exist_ok=True)  # at once: a fault may ask right away
    except OSError as e:
        log(f"control: {control_dir}: {e}")
    t = threading.Thread(target=loop, name="arfl-control", daemon=True)
    t.start()
    return t


ANSWER_GRACE_S = 2.0
"""How long an asker waits past its timeout for the answer to a request the driver already
took: it acted on it, and the answer says how."""


def ask(control_dir: Path, request: dict[str, Any], *, timeout_s: float = 15.0) -> dict[str, Any]:
    """Send ``request`` to the driver watching ``control_dir`` and wait for its answer.

    Raises:
        FaultError: no answer in time (the request is taken back, or the driver took it and
            may have acted on it: the message says which), or the driver's error.
    """
    if not control_dir.is_dir():
        raise FaultError(
            f"{control_dir}: no control directory; the replica's driver has not started (or "
            "was started by an arfl without one)"
        )
    rid = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
    req = control_dir / (rid + REQUEST_SUFFIX)
    resp = control_dir / (rid + RESPONSE_SUFFIX)
    write_json_atomic(req, {**request, "expires": time.time() + timeout_s})
    op = request.get("op")
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline or (
            not req.exists() and time.monotonic() < deadline + ANSWER_GRACE_S
        ):
            if resp.exists():
                answer: dict[str, Any] = json.loads(resp.read_text(encoding="utf-8"))
                if not answer.get("ok"):
                    raise FaultError(f"{op}: the driver answered: {answer.get('error')}")
                return answer
            time.sleep(0.02)
        taken = not req.exists()
    finally:
        # Whatever ended the wait (an answer, the timeout, Ctrl-C): nothing stays behind for a
        # later driver to act on.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(req)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(resp)
    if taken:
        raise FaultError(
            f"{op}: the driver took the request but did not answer within "
            f"{timeout_s + ANSWER_GRACE_S:g} s ({control_dir}); it may have acted on it"
        )
    raise FaultError(
        f"{op}: the driver did not answer within {timeout_s:g} s ({control_dir}); is it running?"
    )
