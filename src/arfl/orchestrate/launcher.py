"""Run one replica's driver in a container and stand for it as a local process.

The supervisor starts ``python -m arfl.orchestrate.launcher --spec F -- <driver argv>`` the way
it starts a local driver; this process creates the container through the docker SDK (its own
environment becomes the container's), streams the container's output to its own, forwards
SIGTERM/SIGINT to the container, and ends the way the container ended: with its exit code, or
killed by the same signal when the container was killed (exit code 128 + n), so that a
``container.kill`` looks to the supervisor exactly like a SIGKILLed local driver.

The spec file (JSON, written by :class:`arfl.orchestrate.network.RunNetwork`)::

    {"name": "arfl-<run>-r0", "image": "arfl-runtime:…", "network": "arfl-<run>",
     "address": "10.214.0.2", "labels": {...}, "read_only": [...], "writable": [...],
     "scratch": ["<spark home>/work", ...], "cwd": "<run dir>", "run_dir": "<run dir>",
     "timing": "<run dir>/replicas/replica-0.container.json"}

``timing`` receives ``{"container": id, "create_s": …, "start_s": …}`` once it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arfl.errors import FaultError
from arfl.run.rundir import write_json_atomic
from arfl.targets import docker as dk
from arfl.targets.container import keep_cut

_DROP_ENV = ("HOSTNAME", "DOCKER_HOST")
_IMAGE_ENV = {"PYTHONUNBUFFERED": "1", "SPARK_LOCAL_IP": "127.0.0.1"}


def container_env(base: dict[str, str], host_runtime: bool = True) -> dict[str, str]:
    """The container's environment. With the host runtime (host directories mounted at their
    own paths): the launcher's, i.e. the driver environment the supervisor built, less what
    names this host. In a user's image: only arfl's own variables (``ARFL_*``) and loopback
    for Spark; the image's ``JAVA_HOME``, ``SPARK_HOME`` and ``PATH`` stand."""
    if not host_runtime:
        return {**{k: v for k, v in base.items() if k.startswith("ARFL_")}, **_IMAGE_ENV}
    return {k: v for k, v in base.items() if k not in _DROP_ENV}


def run(spec: dict[str, Any], argv: Sequence[str]) -> int:
    """Create, start and follow the container; its exit code (>128: killed by a signal).

    SIGTERM/SIGINT are caught from the start: one that comes before the container runs
    removes it and ends the launcher as if the driver had got it; one that comes later is
    forwarded to the container (by a thread: the handler only records it).
    """
    received: list[int] = []
    stopping = threading.Event()

    def note(signum: int, _frame: object) -> None:
        received.append(signum)
        stopping.set()

    signal.signal(signal.SIGTERM, note)
    signal.signal(signal.SIGINT, note)
    c = dk.client()
    name = str(spec["name"])
    t0 = time.monotonic()
    host_runtime = bool(spec.get("host_runtime", True))
    cid = dk.create_container(
        name=name,
        image=str(spec["image"]),
        command=list(argv),
        network=str(spec["network"]),
        address=str(spec["address"]),
        labels={str(k): str(v) for k, v in dict(spec.get("labels") or {}).items()},
        environment=container_env(dict(os.environ), host_runtime),
        mounts=dk.mounts_for(
            spec.get("read_only", []), spec.get("writable", []), system=host_runtime
        ),
        # Scratch space: /tmp, and the Spark home's work/logs/tmp directories (local-cluster
        # workers write under SPARK_HOME/work whatever SPARK_WORKER_DIR says).
        scratch=["/tmp", *spec.get("scratch", [])],
        hostname=str(spec.get("hostname") or name[-63:]),
        cwd=str(spec.get("cwd") or "/"),
        cpus=None if spec.get("cpus") is None else float(spec["cpus"]),
        cpu_shares=None if spec.get("cpu_shares") is None else int(spec["cpu_shares"]),
    )
    t1 = time.monotonic()
    if stopping.is_set():
        dk.remove_container(cid)
        return 128 + received[0]
    try:
        if spec.get("run_dir") and keep_cut(Path(spec["run_dir"]), str(spec["network"]), name):
            print(f"arfl launcher: {name} starts partitioned (a partition of it is pending)",
                  flush=True)  # fmt: skip
    except FaultError as e:  # never start a replica that should be cut off uncut
        print(f"arfl launcher: {e}; container {name} not started", file=sys.stderr, flush=True)
        dk.remove_container(cid)
        return 1

    def forward() -> None:
        stopping.wait()
        what = f"launcher: forwarding a signal to {name}"
        with contextlib.suppress(FaultError), dk.sdk_errors(what):
            c.api.kill(cid, signal=signal.Signals(received[-1]).name)

    threading.Thread(target=forward, name="signal-forward", daemon=True).start()
    with dk.sdk_errors(f"launcher: starting container {name}"):
        c.api.start(cid)
    t2 = time.monotonic()
    if spec.get("timing"):
        write_json_atomic(
            Path(spec["timing"]),
            {
                "container": cid,
                "name": name,
                "create_s": round(t1 - t0, 3),
                "start_s": round(t2 - t1, 3),
                "started": time.time(),
            },
        )
    print(
        f"arfl launcher: container {name} ({cid[:12]}) created in {t1 - t0:.3f}s, "
        f"started in {t2 - t1:.3f}s",
        flush=True,
    )

    def follow() -> None:
        out = sys.stdout.buffer
        for chunk in c.api.logs(cid, stream=True, follow=True):
            out.write(chunk)
            out.flush()

    tail = threading.Thread(target=follow, name="container-logs", daemon=True)
    tail.start()
    code = int(c.api.wait(cid).get("StatusCode", 1))
    tail.join(timeout=2)
    dk.remove_container(cid)
    return code


_DEATHS = frozenset(
    {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
     signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL,
     signal.SIGPIPE, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2}
)  # fmt: skip
"""Signals whose default action ends a process: an exit code 128 + n of one of them is
re-enacted (never SIGSTOP and the like, which would stop the launcher instead)."""


def exit_like(code: int) -> None:
    """End this process the way a container that exited with ``code`` ended."""
    if code > 128 and (code - 128) in {s.value for s in _DEATHS}:
        sig = signal.Signals(code - 128)
        if sig != signal.SIGKILL:  # SIGKILL's action cannot be changed (nor caught)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the signal ends us before this returns
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: ``--spec F -- <driver argv>``; exits like the container did."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        sys.exit("usage: python -m arfl.orchestrate.launcher --spec FILE -- DRIVER-ARGV...")
    cut = args.index("--")
    parser = argparse.ArgumentParser(prog="arfl.orchestrate.launcher")
    parser.add_argument("--spec", required=True)
    ns = parser.parse_args(args[:cut])
    with open(ns.spec, encoding="utf-8") as f:
        spec = json.load(f)
    exit_like(run(spec, args[cut + 1 :]))


if __name__ == "__main__":
    main()
