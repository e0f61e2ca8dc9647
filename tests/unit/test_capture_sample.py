"""scripts/capture-sample: the excerpt of a piped deploy shown by the README and docs/sample.txt."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    path = ROOT / "scripts" / "capture-sample"
    loader = importlib.machinery.SourceFileLoader("capture_sample", str(path))
    spec = importlib.util.spec_from_loader("capture_sample", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _live(t: str, phase: str, p50: str = "6.8", reps: str = "r0:running/8.0 r1:running/9.0",
          merger: str = "merger pid 11") -> str:  # fmt: skip
    figures = f"1s p50={p50} p99=13.3 max=16.4 | all p50=7.2 p99=1,020 max=1,150 | gap 139"
    return f"{t} {phase} | in 1000/s | out 889/s | {figures} | {reps} | {merger}"


def _log() -> list[str]:
    lines = [
        "run directory: runs/demo-1",
        "10:00:00 creating the run",
        "10:00:01 starting replicas | r0:starting r1:starting",
        "10:00:10 waiting for the first batch of replicas 0, 1 | r0:running r1:running",
        "10:00:20 waiting for the first batch of replicas 0, 1 | r0:running r1:running",
        "10:00:25 waiting for the standby | r0:running r1:running",
        _live("10:00:30", "warming up 0/~33 s", p50="-"),
    ]
    lines += [_live(f"10:00:{31 + i}", f"warming up {1 + i}/~33 s") for i in range(10)]
    lines += [_live(f"10:01:{i:02d}", "running") for i in range(10)]
    lines += [_live("10:01:10", "running", reps="r0:restarting r1:running/5.0")]
    lines += [_live(f"10:01:{11 + i}", "running") for i in range(10)]
    lines += [_live(f"10:01:{21 + i}", "draining") for i in range(5)]
    lines += [
        "10:01:30 stopping | r0:running r1:running",
        "done runs/demo-1: produced 1000, results ",  # wrapped at 80 columns by the console
        "900, duplicates dropped 900; longest gap ",
        "139.5 ms",
        "after the 30-s warm-up: latency ms p50=6.8 p99=16.3 (72,129 results)",
        "fault 1 kill-replica on replica 0 at 75.0s: masked (masked: p99 14.7 ms <= 21.3 ms)",
    ]
    return lines


def test_the_excerpt_keeps_the_start_up_the_changes_and_the_verdicts() -> None:
    out = _script().trim(_log())
    text = "\n".join(out)
    assert out[0] == "run directory: runs/demo-1"
    # The start-up: the first line of each phase, repeats left out.
    assert text.count("waiting for the first batch of replicas 0, 1") == 1
    assert "10:00:25 waiting for the standby" in text
    # The first second with results, the change of phase, the change of state with a line
    # either side, the last live line.
    assert "10:00:31 warming up 1/~33 s" in text
    assert "10:00:40 warming up 10/~33 s" in text and "10:01:00 running" in text
    for t in ("10:01:09", "10:01:10", "10:01:11"):
        assert f"{t} running" in text
    assert "10:01:13" not in text
    assert "10:01:30 stopping" in text
    # Left-out stretches are marked with their length.
    assert "[... 8 lines ...]" in out
    # The closing lines whole: the wrapped `done` line joined again.
    done = "done runs/demo-1: produced 1000, results 900, duplicates dropped 900; longest gap"
    assert f"{done} 139.5 ms" in out
    assert out[-1].startswith("fault 1 kill-replica on replica 0 at 75.0s: masked")


def test_the_readme_block_is_replaced_between_its_markers(tmp_path: Path) -> None:
    script = _script()
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{script.BEGIN}\nold\n{script.END}\n\nrest\n")
    assert script.write_readme(["line 1", "line 2"], "arfl deploy x.toml", readme)
    assert readme.read_text() == (
        f"intro\n\n{script.BEGIN}\n```\n# arfl deploy x.toml\nline 1\nline 2\n```\n"
        f"{script.END}\n\nrest\n"
    )
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers\n")
    assert not script.write_readme(["x"], "t", plain)
    assert plain.read_text() == "no markers\n"


def test_the_readme_holds_a_sample_block() -> None:
    script = _script()
    text = (ROOT / "README.md").read_text()
    start, end = text.find(script.BEGIN), text.find(script.END)
    assert 0 <= start < end
    assert "fault 1 " in text[start:end]
