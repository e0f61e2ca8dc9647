"""Processes that start at a fault's moment (a restarted merger) import only what they use."""

from __future__ import annotations

import subprocess
import sys


def test_the_merger_starts_without_the_stack_lifecycle_and_the_spec_models() -> None:
    # ~0.3 s of a merger's restart, a fault's output gap without a standby merger
    # (docs/benchmarks.md, "What a merger kill costs without a standby merger").
    heavy = ("arfl.stack.lifecycle", "arfl.configs.spec")
    code = (
        "import sys, arfl.measure.merger.process; "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_stack_packages_names_still_resolve() -> None:
    from arfl import stack

    assert stack.StackInfo.__name__ == "StackInfo" and stack.topics.__name__ == "arfl.stack.topics"
