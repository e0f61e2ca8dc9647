"""What a merger kill costs, with and without a standby merger: the demo's pipeline
(configs/clicks.toml), its fault replaced by a ``kill-merger``, ``[merger] standby`` 0 and 1
alternating in one invocation.

    .venv/bin/python bench/merger_takeover.py [--rounds 2] [--at 115s] [--runs /tmp/takeover]
                                              [--standby 0,1] [--out takeover.json]

``--standby fence,1`` compares a standby that forwards nothing before its fence ends
(``ARFL_MERGER_FRESH=0``) with arfl's, which forwards at once what was written after the death.

Per run it prints how the merger was replaced (``restart``: a new process from the commits and
the sink's tail; ``standby``: the standby's take-over), the detection and the take-over
(journal: ``merger-took-over`` or ``merger-recovered``; for a standby also when it began to
forward at once, ``fresh ms``, and how many results it owed the fence and forwarded at once
before it ended), the merger's longest output gap, the
report's verdict on the fault (window p99 against its bar), and the independent check's missing
and duplicate results, and the final topic's gaps around the kill (``gaps``: each pause of
more than :data:`GAP_MS` between consecutive sink records' timestamps from 2 s before the kill
to 15 s after it, as ``<start after the kill>+<length>`` in ms: where a take-over's time goes,
and whether the output stalls again after it). The stack must be up (``arfl stack up``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from _common import Column, num, print_table, write_rows

from arfl.configs.load import parse_spec
from arfl.configs.spec import Spec
from arfl.errors import ArflError
from arfl.measure.merger.process import FRESH_ENV
from arfl.orchestrate.deploy import DeployOptions, deploy
from arfl.report.build import build_report
from arfl.run.rundir import read_jsonl
from arfl.stack.topics import read_to_end

GAP_MS = 25
"""The shortest pause between two sink records listed in ``gaps``."""

DEMO = Path(__file__).resolve().parent.parent / "configs" / "clicks.toml"


def spec_for(standby: int, at: str) -> Spec:
    """The demo's spec with one ``kill-merger`` at ``at`` and ``standby`` standby mergers."""
    raw: dict[str, Any] = tomllib.loads(DEMO.read_text())
    raw["name"] = f"takeover-s{standby}"
    raw["chaos"] = [{"at": at, "fault": "kill-merger"}]
    raw["merger"] = {**raw.get("merger", {}), "standby": standby}
    return parse_spec(raw, "merger_takeover")


def sink_gaps(run_dir: Path, kill_t: float) -> str:
    """The final topic's pauses near the kill (see the module docstring)."""
    cfg = json.loads((run_dir / "config" / "merger.json").read_text())
    msgs = read_to_end(
        cfg["bootstrap"], cfg["sink"], error=ArflError, missing_hint="", unreachable_hint="",
        timeout_s=30.0,
    )  # fmt: skip
    kill_ms = kill_t * 1000
    ts = sorted(t for m in msgs if kill_ms - 2000 <= (t := m.timestamp()[1]) <= kill_ms + 15000)
    gaps = [f"{a - kill_ms:+.0f}+{b - a}" for a, b in itertools.pairwise(ts) if b - a > GAP_MS]
    return " ".join(gaps) or "-"


def analyse(run_dir: Path) -> dict[str, Any]:
    """The take-over, the gap, the verdict and the check of one run."""
    journal = read_jsonl(run_dir / "journal.jsonl")
    injected = next(e for e in journal if e["event"] == "fault-injected")
    kill_t = float(injected["ended"])
    took = next((e for e in journal if e["event"] == "merger-took-over"), None)
    recovered = next((e for e in journal if e["event"] == "merger-recovered"), None)
    died = next((e for e in journal if e["event"] == "merger-died"), None)
    row: dict[str, Any] = {}
    if took is not None:
        row["detect_ms"] = (float(took["detected"]) - kill_t) * 1000
        row["serving_ms"] = (float(took["detected"]) + float(took["took_s"]) - kill_t) * 1000
        row["owed"] = took.get("owed")
        row["fresh"] = took.get("fresh")
        if took.get("fresh_s") is not None:
            row["fresh_ms"] = (float(took["detected"]) + float(took["fresh_s"]) - kill_t) * 1000
    elif recovered is not None and died is not None:
        row["detect_ms"] = (float(died["t"]) - kill_t) * 1000
        row["serving_ms"] = (float(recovered["t"]) - kill_t) * 1000
    merger = json.loads((run_dir / "merger.json").read_text())
    check = json.loads((run_dir / "check.json").read_text())
    (fault,) = build_report(run_dir).faults
    row.update(
        gap_ms=merger["longest_gap_ms"],
        p99_ms=fault.p99_ms,
        bar_ms=None if fault.steady_p99_ms is None else 1.1 * fault.steady_p99_ms,
        masked=fault.masked,
        verdict=fault.verdict,
        missing=check.get("missing"),
        duplicates=check.get("duplicates"),
        results=merger["results"],
        gaps=sink_gaps(run_dir, kill_t),
    )
    return row


COLUMNS = [
    Column("detect ms", 10, ".0f", lambda r: num(r.get("detect_ms"))),
    Column("serving ms", 11, ".0f", lambda r: num(r.get("serving_ms"))),
    Column("fresh ms", 9, ".0f", lambda r: num(r.get("fresh_ms"))),
    Column("owed", 5, "", lambda r: str(r.get("owed", "-"))),
    Column("fresh", 6, "", lambda r: str(r.get("fresh", "-"))),
    Column("gap ms", 8, ".0f", lambda r: num(r.get("gap_ms"))),
    Column("window p99", 11, ".1f", lambda r: num(r.get("p99_ms"))),
    Column("bar", 7, ".1f", lambda r: num(r.get("bar_ms"))),
    Column("masked", 7, "", lambda r: str(r.get("masked"))),
    Column("missing", 8, "", lambda r: str(r.get("missing"))),
    Column("dups", 5, "", lambda r: str(r.get("duplicates"))),
    Column("gaps", 30, "", lambda r: str(r.get("gaps"))),
]


def main(argv: list[str] | None = None) -> int:
    """Run the variants, alternating, and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--at", default="115s", help="when the merger is killed (from input start)")
    ap.add_argument("--runs", type=Path, default=Path("/tmp/takeover"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--standby",
        default="0,1",
        help="the [merger] standby values to alternate (0,1; 1); 'fence' is a standby that "
        "forwards nothing before its fence ends",
    )
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for variant in args.standby.split(","):
            standby = 0 if variant == "0" else 1
            kind = {"0": "restart", "fence": "standby, fence first"}.get(variant, "standby")
            name = f"{kind} #{rnd + 1}"
            print(f"--- {name}", file=sys.stderr, flush=True)
            os.environ[FRESH_ENV] = "0" if variant == "fence" else "1"
            try:
                res = deploy(spec_for(standby, args.at), None, DeployOptions(runs_root=args.runs))
                rows.append({"variant": name, "run": str(res.run_dir), **analyse(res.run_dir)})
            except (ArflError, OSError, StopIteration, ValueError) as e:
                rows.append({"variant": name, "error": str(e)})
            write_rows(args.out, rows)
    print_table(rows, Column("merger kill", 12, "", lambda r: r["variant"], True), COLUMNS)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
