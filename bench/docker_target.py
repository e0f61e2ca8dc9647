"""The docker target's costs: runtime image build, container start-up, replica start-up.

    .venv/bin/python bench/docker_target.py [--repeat 3] [--deploy ROUNDS]

1. the runtime image (``docker import`` of mount points): build time (the cached tag removed
   first) and size;
2. ``java -version`` on the host vs in a container with the host directories bind-mounted
   (create + start + exit): what a container adds to starting a JVM;
3. with ``--deploy N``: N pairs of runs (order alternating) of bench/startup.py's R=2
   active-leaderless windowed pipeline, ``spark.target`` local vs docker: seconds until each
   replica's SparkSession was up and until every replica ran a batch, p50 latency, CPU.

Needs a docker daemon (scripts/docker-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import Column, print_table
from startup import analyse, spec_for

from arfl.errors import ArflError
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.targets import docker as dk


def image_build(repeat: int) -> dict[str, Any]:
    c = dk.client()
    times: list[float] = []
    size = 0
    for _ in range(repeat):
        tag = dk.runtime_tag()
        if c.images.list(name=tag):
            c.images.remove(tag, force=True)
        info = dk.ensure_image()
        assert info.built
        times.append(info.build_s)
        size = info.size_bytes
    return {"build_s_median": statistics.median(times), "build_s": times, "size_bytes": size}


def java_version(repeat: int) -> dict[str, Any]:
    java = subprocess.run(["sh", "-c", "command -v java"], capture_output=True, text=True)
    exe = java.stdout.strip()
    host: list[float] = []
    for _ in range(repeat):
        t = time.monotonic()
        subprocess.run([exe, "-version"], capture_output=True, check=True)
        host.append(time.monotonic() - t)
    c = dk.client()
    image = dk.ensure_image().tag
    inside: list[float] = []
    create: list[float] = []
    for _ in range(repeat):
        t = time.monotonic()
        cid = c.api.create_container(
            image,
            command=[exe, "-version"],
            host_config=c.api.create_host_config(mounts=dk.mounts_for([]), init=True),
            labels={dk.LABEL_KIND: "bench"},
        )["Id"]
        t1 = time.monotonic()
        c.api.start(cid)
        code = c.api.wait(cid)["StatusCode"]
        inside.append(time.monotonic() - t)
        create.append(t1 - t)
        c.api.remove_container(cid, force=True)
        assert code == 0
    return {
        "host_s": statistics.median(host),
        "container_s": statistics.median(inside),
        "create_s": statistics.median(create),
    }


def deploys(runs: Path, rounds: int) -> list[dict[str, Any]]:
    """``rounds`` pairs of deploys, the order alternating (local first, then docker first)."""
    rows: list[dict[str, Any]] = []
    order = [t for i in range(rounds) for t in (("local", "docker")[:: 1 if i % 2 == 0 else -1])]
    for target in order:
        spec = spec_for("active-leaderless", 2, {}, "30s", target)
        try:
            res = deploy(spec, None, DeployOptions(runs_root=runs))
        except ArflError as e:
            print(f"{target}: failed: {e}", file=sys.stderr)
            continue
        row = {"target": target, "run": str(res.run_dir), **analyse(res.run_dir)}
        timing = sorted((res.run_dir / "replicas").glob("replica-*.container.json"))
        row["container_start_s"] = [
            round(json.loads(p.read_text())["create_s"] + json.loads(p.read_text())["start_s"], 3)
            for p in timing
        ]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--deploy", type=int, default=0, metavar="ROUNDS")
    ap.add_argument("--runs", type=Path, default=Path("runs/bench"))
    args = ap.parse_args(argv)
    print(json.dumps({"image": image_build(args.repeat)}), flush=True)
    print(json.dumps({"java -version": java_version(args.repeat)}), flush=True)
    if args.deploy:
        rows = deploys(args.runs, args.deploy)
        print_table(
            rows,
            Column("target", 8, "", lambda r: r["target"]),
            [
                Column("session s", 9, ".1f", lambda r: r["session_up_s"]),
                Column("1st batch s", 11, ".1f", lambda r: r["first_batch_all_s"]),
                Column("p50 ms", 8, ".0f", lambda r: r["p50_ms"] or 0),
                Column("cpu s", 6, ".1f", lambda r: r["cpu_s"] or 0),
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
