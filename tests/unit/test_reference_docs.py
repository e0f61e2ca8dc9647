"""docs/spec.md and docs/faults.md are generated from the code: the checked-in files must be what
the generators write now, so that a new key or fault kind cannot go undocumented."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

import pytest

from arfl.configs.reference import first_sentence, markdown, spec_markdown
from arfl.configs.spec import Spec
from arfl.faults.reference import faults_markdown
from arfl.registry import FAULTS

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize(
    ("name", "generate"), [("spec.md", spec_markdown), ("faults.md", faults_markdown)]
)
def test_checked_in_reference_is_current(name: str, generate: Callable[[], str]) -> None:
    path = DOCS / name
    want = generate()
    have = path.read_text(encoding="utf-8") if path.exists() else ""
    if have != want:
        diff = "".join(
            difflib.unified_diff(
                have.splitlines(keepends=True),
                want.splitlines(keepends=True),
                f"docs/{name} (checked in)",
                f"docs/{name} (generated)",
                n=1,
            )
        )
        pytest.fail(f"docs/{name} is stale: run `make docs` and commit it\n{diff[:4000]}")


def test_every_spec_key_and_fault_kind_is_in_the_reference() -> None:
    spec_doc, faults_doc = spec_markdown(), faults_markdown()
    for section in ("source", "replication", "workload", "merger", "report"):
        model = Spec.model_fields[section].annotation
        assert isinstance(model, type)
        for name in model.model_fields:
            assert f"`{section}.{name}`" in spec_doc, f"{section}.{name}"
    for kind in FAULTS.names():
        assert f"## `{kind}`" in faults_doc
        assert f'`"{kind}"`' in spec_doc  # among [[chaos]].fault's allowed values


def test_descriptions_read_as_markdown_on_one_line() -> None:
    text = (
        "How late (:mod:`arfl.faults.align`) a ``[merger] lease`` may be. Then more.\n\nNot this."
    )
    assert markdown(first_sentence(text)) == "How late a `[merger] lease` may be."
    assert first_sentence("Settings (``kafka.*``, e.g. ``kafka.x``); more. Next.") == (
        "Settings (``kafka.*``, e.g. ``kafka.x``); more."
    )
    assert markdown("a | b") == "a \\| b"
