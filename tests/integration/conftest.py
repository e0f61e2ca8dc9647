"""Integration tests start real processes; every test here carries the ``integration`` marker."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from arfl.testing import EmbeddedStack

_HERE = Path(__file__).parent

# Shared checks live in a plain module: let pytest explain its failed asserts too.
pytest.register_assert_rewrite("deploy_checks")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark everything under ``tests/integration`` so ``-m 'not integration'`` skips it."""
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[EmbeddedStack]:
    """A private, not yet started stack in ``tmp_path``; stopped after the test whatever happens.

    For tests of the stack's own life cycle (up, up again, down), which must not disturb the
    session's shared ``stack``.
    """
    harness = EmbeddedStack(tmp_path / "stack")
    try:
        yield harness
    finally:
        harness.stop()


@pytest.fixture(autouse=True, scope="module")
def _offline_session_per_module() -> Iterator[None]:
    """The offline recomputation's batch session (``deploy_checks.offline_recompute``) lives for
    one test module: stopped after it, so that no other module's in-process Spark session
    (``local_session``) finds it instead of its own."""
    yield
    checks = sys.modules.get("deploy_checks")  # imported by the module's tests, if at all
    if checks is not None:
        checks.close_offline_session()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; any still running at the end are killed by pid."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)
