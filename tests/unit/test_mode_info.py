"""A replication mode's properties live in its registration: the spec, the resume plan and the
driver read them from ``ModeInfo``, never from the mode's name.

The mode below is what a module of ``arfl.replica.modes`` would register; the fixture adds it
with the registry's decorator and removes it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from arfl.configs.load import parse_spec
from arfl.errors import SpecError
from arfl.registry import MODES, ModeInfo

MODE = "test-mode"


def _at_most_three(repl: Any) -> list[tuple[str, str]]:
    if repl.replicas > 3:
        return [("replication.replicas", "test-mode runs at most 3 replicas here")]
    return []


class ModeForTests:
    name = MODE


@pytest.fixture
def mode() -> Iterator[None]:
    MODES.names()  # the real modes first
    MODES.register(
        MODE,
        ModeInfo(
            "a mode for tests",
            min_replicas=2,
            max_replicas=None,
            triggers=frozenset({"micro-batch"}),
            active=True,
            coordination_free=True,
            async_progress=True,
            resumes_from_peers=True,
            check=_at_most_three,
        ),
    )(ModeForTests)
    try:
        yield
    finally:
        MODES._entries.pop(MODE, None)


def _raw(**replication: object) -> dict[str, object]:
    return {
        "name": "t",
        "source": {"topic": "in", "event_time": "ts"},
        "sink": {"topic": "out"},
        "steps": [{"filter": "amount > 1"}],
        "replication": {"mode": MODE, "replicas": 2, **replication},
    }


def test_the_modes_own_check_is_the_specs(mode: None) -> None:
    with pytest.raises(SpecError, match="test-mode runs at most 3 replicas here"):
        parse_spec(_raw(replicas=4), "t.toml")
    assert parse_spec(_raw(replicas=3)).replication.replicas == 3


def test_resume_and_async_progress_follow_the_modes_properties(mode: None) -> None:
    from arfl.replica.app import async_progress

    spec = parse_spec(_raw())
    assert spec.resumes_from_output and not spec.resumes_from_peer
    assert spec.restart_plan is not None and "output frontier" in spec.restart_plan
    assert async_progress(spec)
    # 'peer' is offered by the modes that say so, this one among them
    assert parse_spec(_raw(resume="peer")).resumes_from_peer
    with pytest.raises(SpecError, match=f"'peer' needs mode '{MODE}' or 'active', not 'passive'"):
        parse_spec({**_raw(resume="peer"), "replication": {"mode": "passive", "resume": "peer"}})
