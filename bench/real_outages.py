"""How often is a real outage called "masked"? The other side of ``bench/null_faults.py``.

    .venv/bin/python bench/real_outages.py [--cases lone-pause,lone-kill,boundary]
        [--runs-per-case 2] [--seed N] [--runs DIR] [--out F]

``null_faults.py`` counts false alarms: a fault that changed nothing called *not* masked. This
counts the other error, a fault whose harm reached the user's output called *masked*; the goal
is 0. Each case deploys the README's per-record spec (active, real-time mode, 2 partitions,
1,000 ev/s, nothing else set: arfl's masking defaults apply) with real outages placed at moments
nobody chose (drawn from ``--seed``, by default the clock, printed):

* ``lone-pause``: one replica (nothing covers it), paused for 2 s, 7 times a run, one draw in
  each 15-s stratum after the warm-up (at least 10 s apart, so every window closes before the
  next pause);
* ``lone-kill``: one replica killed (its standby takes over within ~3 s, nothing covers that),
  twice a run, 75 s apart (the successor standby is ready again by then);
* ``boundary``: two replicas, replica 0 killed 29-31 s (drawn) after the survivor's batch
  boundary, so that the survivor's next boundary (~31.5-33.6 s apart at the 30-s interval) falls
  inside the newcomer's catch-up, the placement that ``bench/p_masked.py`` found unmasked.

Whether the output was really harmed is decided here, from ``latency.hlog`` through hdrh's own
reader, sharing no code with the report: a fault is a **real outage** when, over the 10 s after
it, the merged output's highest latency is at least 5 x the p99 of the 30 s before the run's
first fault and at least 100 ms, or at least 2 of its 1-s intervals hold no result (the output
stopped). Each fault's outcome is the report's (:mod:`arfl.report.verdicts`).
The table counts, per case, the real outages and how many of them the report called masked
(false-masked); "no effect" and "unjudged" are not masked and are counted apart.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
from null_faults import HIGHEST_US
from p_masked import DEFAULT_SPEC, wilson
from realtime import run

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import ArflError
from arfl.report.build import build_report
from arfl.run.rundir import read_jsonl

OUTAGE_FACTOR = 5.0
"""A fault is a real outage when the window's highest latency is at least this many times the
steady p99 ..."""
OUTAGE_FLOOR_MS = 100.0
"""... and at least this (a steady p99 of a few ms times 5 is still within the host's noise)."""
WINDOW_S = 10.0
"""How long after the fault the output is looked at for harm."""
STEADY_S = 30.0
"""How long before the run's first fault the steady p99 is taken from."""
SILENT_S = 2
"""... or when at least this many of the window's 1-s intervals hold no result at all (a
steady 1,000 ev/s never leaves a second empty)."""


def _raw(name: str, replicas: int, duration_s: int) -> dict[str, Any]:
    raw = copy.deepcopy(DEFAULT_SPEC)
    raw["name"] = name
    raw["replication"]["replicas"] = replicas
    if replicas == 1:
        raw["replication"]["mode"] = "none"
    raw["workload"]["duration"] = f"{duration_s}s"
    raw["workload"].pop("warmup", None)  # automatic: the replicas' first boundaries
    return raw


def case_spec(case: str, k: int, rng: random.Random) -> Spec:
    """Run ``k`` of ``case`` (module docstring), its moments drawn from ``rng``."""
    if case == "lone-pause":
        raw = _raw(f"ro-pause-{k}", 1, 160)
        chaos = [
            {"at": f"{45 + 15 * i + rng.uniform(0, 5):.1f}s", "fault": "pause", "replica": 0,
             "duration": "2s"}
            for i in range(7)
        ]  # fmt: skip
    elif case == "lone-kill":
        raw = _raw(f"ro-kill-{k}", 1, 170)
        chaos = [
            {"at": f"{a + rng.uniform(0, 15):.1f}s", "fault": "kill-replica", "replica": 0}
            for a in (45, 120)
        ]
    elif case == "boundary":
        raw = _raw(f"ro-boundary-{k}", 2, 150)
        chaos = [
            {"at": f"{rng.uniform(45, 55):.1f}s", "fault": "kill-replica", "replica": 0,
             "after_boundary": f"{rng.uniform(29, 31):.1f}s"}
        ]  # fmt: skip
    else:
        raise ValueError(f"unknown case {case!r}")
    raw["chaos"] = chaos
    return parse_spec(raw, "real_outages")


def _all_intervals(hlog: Path) -> list[tuple[float, HdrHistogram]]:
    """``(start epoch s, histogram)`` of every interval of an HdrHistogram log, empty ones too
    (a second without results is what an outage looks like)."""
    reader = HistogramLogReader(str(hlog), HdrHistogram(1, HIGHEST_US, 3))
    out: list[tuple[float, HdrHistogram]] = []
    while (h := reader.get_next_interval_histogram()) is not None:
        copy = HdrHistogram(1, HIGHEST_US, 3)
        copy.add(h)
        out.append((h.get_start_time_stamp() / 1000.0, copy))
    reader.close()
    return out


def harm(run_dir: Path) -> list[dict[str, Any]]:
    """Per injected fault, from ``latency.hlog`` alone: the steady p99 before the first fault,
    the window's highest latency and its seconds without results, and whether that is a real
    outage (module docstring)."""
    journal = read_jsonl(run_dir / "journal.jsonl")
    starts = [float(e["started"]) for e in journal if e.get("event") == "fault-injected"]
    if not starts:
        return []
    ivs = _all_intervals(run_dir / "latency.hlog")
    steady = HdrHistogram(1, HIGHEST_US, 3)
    for s, h in ivs:
        if starts[0] - STEADY_S <= s < starts[0]:
            steady.add(h)
    n = steady.get_total_count()
    steady_p99 = steady.get_value_at_percentile(99.0) / 1000.0 if n else None
    out = []
    for a in starts:
        window = [h for s, h in ivs if a - 1.0 < s < a + WINDOW_S]
        worst = max((h.get_max_value() / 1000.0 for h in window if h.get_total_count()),
                    default=None)  # fmt: skip
        silent = sum(1 for h in window if not h.get_total_count())
        slow = (
            worst is not None
            and steady_p99 is not None
            and worst >= max(OUTAGE_FACTOR * steady_p99, OUTAGE_FLOOR_MS)
        )
        out.append(
            {
                "steady_p99_ms": steady_p99,
                "window_max_ms": worst,
                "silent_s": silent,
                "real": steady_p99 is not None and (slow or silent >= SILENT_S),
            }
        )
    return out


def analyse(case: str, run_dir: Path) -> list[dict[str, Any]]:
    """One row per fault of a run: the report's outcome beside the harm seen in the hlog."""
    report = build_report(run_dir)
    truth = harm(run_dir)
    rows = []
    for i, f in enumerate(report.faults):
        h = truth[i] if i < len(truth) else {"real": None}
        rows.append(
            {
                "case": case,
                "run": str(run_dir),
                "at_s": f.at_s,
                "outcome": f.outcome,
                "verdict": f.verdict,
                "effect": f.effect,
                "p99_ms": f.p99_ms,
                "max_gap_ms": f.max_gap_ms,
                **h,
            }
        )
    return rows


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


CASE_OF = {"ro-pause": "lone-pause", "ro-kill": "lone-kill", "ro-boundary": "boundary"}
"""Run directory name prefix -> case (``--reanalyse``)."""


def table(rows: list[dict[str, Any]], cases: list[str], title: str) -> None:
    print(f"\n{title}")
    print(f"{'case':11} {'at s':>6} {'outcome':12} {'window max ms':>13} {'silent s':>8} "
          f"{'steady p99':>10} real")  # fmt: skip
    for r in rows:
        print(
            f"{r['case']:11} {_f(r.get('at_s')):>6} {r['outcome']:12} "
            f"{_f(r.get('window_max_ms')):>13} {r.get('silent_s', '-'):>8} "
            f"{_f(r.get('steady_p99_ms')):>10} {r.get('real')}"
        )
    for case in cases:
        real = [r for r in rows if r["case"] == case and r.get("real")]
        masked = sum(r["outcome"] == "masked" for r in real)
        other = {o: sum(r["outcome"] == o for r in real) for o in {r["outcome"] for r in real}}
        lo, hi = wilson(masked, len(real))
        harmless = sum(r["case"] == case and r.get("real") is False for r in rows)
        print(
            f"{case}: called masked {masked}/{len(real)} real outages (95% interval "
            f"{lo:.2f}-{hi:.2f}); outcomes {other or '-'}; {harmless} faults without harm"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cases", default="lone-pause,lone-kill,boundary")
    ap.add_argument("--runs-per-case", type=int, default=2)
    ap.add_argument("--seed", type=int, default=None, help="default: the clock")
    ap.add_argument("--runs", type=Path, default=Path("runs/bench/real_outages"))
    ap.add_argument("--out", type=Path, default=Path("runs/bench/real_outages.json"))
    ap.add_argument(
        "--reanalyse", action="store_true",
        help="judge the runs already in --runs again (the report's code as it is now)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    cases = args.cases.split(",")
    if args.reanalyse:
        rows = []
        for run_dir in sorted(args.runs.iterdir()):
            case = CASE_OF.get(run_dir.name.rsplit("-", 3)[0])
            if case in cases and (run_dir / "journal.jsonl").exists():
                rows += analyse(case, run_dir)
        table(rows, cases, f"Real outages called masked, the runs in {args.runs} judged again")
        return 0
    seed = args.seed if args.seed is not None else int(time.time())
    print(f"seed {seed}", flush=True)
    rng = random.Random(seed)
    rows = []
    args.runs.mkdir(parents=True, exist_ok=True)
    for k in range(args.runs_per_case):
        for case in cases:  # alternate, so drift on the host falls on every case alike
            spec = case_spec(case, k, rng)
            moments = [c.at for c in spec.chaos]
            try:
                run_dir, _, _, _ = run(spec, args.runs)
                got = analyse(case, run_dir)
            except ArflError as e:
                got = [{"case": case, "outcome": "failed", "error": str(e), "real": None}]
                print(f"{case} run {k}: failed: {e}", file=sys.stderr)
            rows += got
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(rows, indent=1, default=str))
            print(f"{case} run {k} (moments {moments}): "
                  f"{[(r['outcome'], r.get('real')) for r in got]}", flush=True)  # fmt: skip
    table(rows, cases, f"Real outages called masked, seed {seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
