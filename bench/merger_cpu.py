"""Where the merger's cores go: the real merger loop at a steady rate, two copies a result,
variants of its Python path and the floors of a bare forwarder alternating in one invocation.

    .venv/bin/arfl stack up
    .venv/bin/python bench/merger_cpu.py [--rate 1000] [--seconds 30] [--rounds 2]
        [--variants orjson,json,floor-python,floor-c,floor-go] [--out F]

Each run creates a sink and two replica topics (4 partitions) on the stack at 127.0.0.1:9092,
forks a process that writes ``--rate`` results a second to both replica topics as
``bench/merger_memory.py`` does (replica 1's copy 2 ms after replica 0's), and runs
:class:`arfl.measure.merger.process.Merger` in a thread of this process until the input ends.
It reports the merger thread's CPU (``time.thread_time``: the Python loop and the client calls
it makes) and the process's (with librdkafka's threads), in cores over the run's wall time.

Variants: ``orjson`` (arfl's: results parsed with orjson) and ``json`` (the standard library's
parser in its place). The ``floor-*`` variants run, as a process of their own on the same
input, a forwarder with no merge logic (a set of ids; ``bench/merger_floor/``): what reading
both copies and writing the first costs in a language and client before any of arfl's work:
``floor-python`` (confluent-kafka, arfl's client and settings), ``floor-c`` (librdkafka, built
with ``gcc`` against ``librdkafka-dev``), ``floor-go`` (franz-go, built with ``go``). Their CPU
is the child's own rusage (``os.wait4``); a floor whose toolchain is missing is reported as
failed with what to install.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import psutil
from _common import Column, print_table, write_rows
from merger_memory import Produced, produce_results

import arfl.run.records as records
from arfl.measure.merger.config import MergerConfig
from arfl.measure.merger.process import Merger
from arfl.run.records import replica_topic
from arfl.stack.topics import ensure_topic

BOOTSTRAP = "127.0.0.1:9092"
FLOOR_DIR = Path(__file__).resolve().parent / "merger_floor"
BUILD_DIR = Path.home() / ".cache" / "arfl" / "merger-floor"


class _StdlibJson:
    """Stands in for orjson in :mod:`arfl.run.records` (the ``json`` variant)."""

    loads = staticmethod(json.loads)


def start_input(prefix: str, rate: float, seconds: float) -> tuple[str, float, int]:
    """Fresh sink and replica topics, and a forked process writing ``rate`` results a second
    to both replica topics from a second from now (the replicas).

    Returns:
        The sink topic, when the input starts (epoch s) and the writer's pid.
    """
    sink = f"{prefix}-{uuid.uuid4().hex[:8]}"
    for t in (sink, replica_topic(sink, 0), replica_topic(sink, 1)):
        ensure_topic(BOOTSTRAP, t, partitions=4)
    start = time.time() + 1.0
    child = os.fork()
    if child == 0:
        try:
            produce_results(BOOTSTRAP, sink, rate, seconds + 2, start, 0.002, Produced(),
                            lambda _now: None)  # fmt: skip
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    return sink, start, child


def run_merger(sink: str, until: float, work: Path) -> dict[str, float]:
    """arfl's merger of ``sink`` (R=2) in a thread of this process until ``until`` (epoch s),
    its run directory ``work / sink``: the thread's and the process's cores over its run."""
    cfg = MergerConfig(bootstrap=BOOTSTRAP, sink=sink, replicas=2, run_dir=work / sink, until=until)
    merger = Merger(cfg)
    thread_s: list[float] = []

    def run() -> None:
        t0 = time.thread_time()
        merger.run()
        thread_s.append(time.thread_time() - t0)

    proc = psutil.Process()
    c0, w0 = proc.cpu_times(), time.time()
    th = threading.Thread(target=run)
    th.start()
    th.join()
    c1, wall = proc.cpu_times(), time.time() - w0
    return {
        "thread_cores": thread_s[0] / wall,
        "process_cores": (c1.user + c1.system - c0.user - c0.system) / wall,
    }


def one_run(variant: str, rate: float, seconds: float, work: Path) -> dict[str, Any]:
    """One merger run of ``variant``; its CPU in cores."""
    sink, start, child = start_input("merger-cpu", rate, seconds)
    saved = records.orjson
    if variant == "json":
        records.orjson = _StdlibJson  # type: ignore[assignment]
    try:
        cores = run_merger(sink, start + seconds + 2.5, work)
    finally:
        records.orjson = saved
    if os.waitpid(child, 0)[1] != 0:
        raise RuntimeError("the replicas' writer failed; its traceback is above")
    final = json.loads((work / sink / "merger.json").read_text())
    return {
        "variant": variant,
        **cores,
        "results": final["results"],
        "duplicates": final["duplicates"],
        "p50_ms": final["latency_ms"].get("p50"),
    }


def floor_command(variant: str) -> list[str]:
    """The command that runs the forwarder of ``variant`` (built first, once per source).

    Raises:
        RuntimeError: its toolchain or library is missing (what to install).
    """
    if variant == "floor-python":
        return [sys.executable, str(FLOOR_DIR / "forward.py")]
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    if variant == "floor-c":
        src, exe = FLOOR_DIR / "forward.c", BUILD_DIR / "forward-c"
        if shutil.which("gcc") is None or not Path("/usr/include/librdkafka/rdkafka.h").exists():
            raise RuntimeError("needs gcc and librdkafka's headers: apt-get install librdkafka-dev")
        build = ["gcc", "-O2", "-Wall", "-o", str(exe), str(src), "-lrdkafka"]
        cwd = FLOOR_DIR
    elif variant == "floor-go":
        src, exe = FLOOR_DIR / "go" / "main.go", BUILD_DIR / "forward-go"
        if shutil.which("go") is None:
            raise RuntimeError("needs the go command")
        build, cwd = ["go", "build", "-o", str(exe), "."], FLOOR_DIR / "go"
    else:
        raise RuntimeError(f"unknown variant {variant!r}")
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        done = subprocess.run(build, cwd=cwd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(build)} failed: {done.stderr.strip()[-300:]}")
    return [str(exe)]


def floor_run(variant: str, rate: float, seconds: float) -> dict[str, Any]:
    """One run of a bare forwarder (:func:`floor_command`) on the input of :func:`one_run`."""
    command = floor_command(variant)
    sink, start, child = start_input("merger-floor", rate, seconds)
    topics = [replica_topic(sink, 0), replica_topic(sink, 1)]
    w0 = time.time()
    args = [BOOTSTRAP, sink, *topics, "4", f"{start + seconds + 2.5 - w0:.3f}"]
    proc = subprocess.Popen([*command, *args], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout is not None else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - w0
    proc.returncode = os.waitstatus_to_exitcode(status)
    os.waitpid(child, 0)
    counts = out.split()  # results N duplicates M [setup_cpu_s S]
    if proc.returncode != 0 or len(counts) not in (4, 6):
        raise RuntimeError(f"{command[-1]} exited {proc.returncode}: {out.strip()[:200]}")
    setup_s = float(counts[5]) if len(counts) == 6 else 0.0
    return {
        "variant": variant,
        "thread_cores": None,
        "process_cores": (usage.ru_utime + usage.ru_stime - setup_s) / wall,
        "results": int(counts[1]),
        "duplicates": int(counts[3]),
        "p50_ms": None,
    }


COLUMNS = [
    Column("thread cores", 13, "", lambda r: _cores(r["thread_cores"])),
    Column("process cores", 14, ".3f", lambda r: r["process_cores"]),
    Column("results", 9, "d", lambda r: r["results"]),
    Column("duplicates", 11, "d", lambda r: r["duplicates"]),
]


def _cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    """Alternate the variants ``--rounds`` times and print the table."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="orjson,floor-python,floor-c,floor-go")
    ap.add_argument("--work", type=Path, default=Path("/tmp/merger_cpu"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for variant in args.variants.split(","):
            print(f"--- {variant} #{rnd + 1}", file=sys.stderr, flush=True)
            try:
                row = (
                    floor_run(variant, args.rate, args.seconds)
                    if variant.startswith("floor-")
                    else one_run(variant, args.rate, args.seconds, args.work)
                )
            except RuntimeError as e:
                row = {"error": str(e)}
            rows.append({**row, "variant": f"{variant} #{rnd + 1}"})
            write_rows(args.out, rows)
    print_table(rows, Column("variant", 15, "", lambda r: r["variant"], True), COLUMNS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
