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
     "scratch": ["<spark home>/work", ...], "cwd": "<run dir>",
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

from arfl.faults import docker as dk
from arfl.run.rundir import write_json_atomic

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
    """Create, start and follow the container; its exit code (>128: killed by a signal)."""
    import docker.errors

    c = dk.client()
    name = str(spec["name"])
    try:  # a launcher killed with -9 leaves its container behind: the name is ours again
        old = c.containers.get(name)
        if old.status == "paused":
            old.unpause()
        old.remove(force=True)
    except docker.errors.NotFound:
        pass
    t0 = time.monotonic()
    network = str(spec["network"])
    host_runtime = bool(spec.get("host_runtime", True))
    host_config = c.api.create_host_config(
        mounts=dk.mounts_for(
            spec.get("read_only", []), spec.get("writable", []), system=host_runtime
        ),
        # Scratch space: /tmp, and the Spark home's work/logs/tmp directories (local-cluster
        # workers write under SPARK_HOME/work whatever SPARK_WORKER_DIR says).
        tmpfs={p: "exec,mode=1777" for p in ["/tmp", *spec.get("scratch", [])]},
        init=True,
        network_mode=network,
    )
    net_config = c.api.create_networking_config(
        {network: c.api.create_endpoint_config(ipv4_address=str(spec["address"]))}
    )
    created = c.api.create_container(
        str(spec["image"]),
        command=list(argv),
        name=name,
        hostname=str(spec.get("hostname") or name[-63:]),
        labels={str(k): str(v) for k, v in dict(spec.get("labels") or {}).items()},
        environment=container_env(dict(os.environ), host_runtime),
        user="0:0",  # the run directory is the deploying user's; an image's USER may differ
        working_dir=str(spec.get("cwd") or "/"),
        host_config=host_config,
        networking_config=net_config,
    )
    cid = str(created["Id"])
    t1 = time.monotonic()
    stopping = threading.Event()

    def forward(signum: int, _frame: object) -> None:
        stopping.set()
        with contextlib.suppress(docker.errors.APIError):
            c.api.kill(cid, signal=signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
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
    with contextlib.suppress(docker.errors.APIError):
        c.api.remove_container(cid, force=True)
    return code


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
    code = run(spec, args[cut + 1 :])
    if code > 128 and code - 128 in {s.value for s in signal.Signals}:
        sig = code - 128
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)  # end the way the container's driver ended
        time.sleep(1)
    sys.exit(code)


if __name__ == "__main__":
    main()
