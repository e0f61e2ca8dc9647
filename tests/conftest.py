"""Fixtures shared by every test: the embedded stack, unique topic names, no leftover JVMs."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import psutil
import pytest

from arfl.errors import FaultError
from arfl.stack import StackInfo, down
from arfl.targets.cgroups import CpuHierarchy, detect
from arfl.testing import EmbeddedStack


def _our_java(base: Path, me: psutil.Process) -> list[psutil.Process]:
    """Java processes this session started: descendants, or ones whose cmdline names basetemp."""
    found: dict[int, psutil.Process] = {}
    try:
        for child in me.children(recursive=True):
            found[child.pid] = child
    except psutil.Error:
        pass
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if any(str(base) in a for a in cmd):
            found[p.pid] = p
    out = []
    for p in found.values():
        try:
            # A zombie main thread with live threads is a JVM still shutting down.
            exited = p.status() == psutil.STATUS_ZOMBIE and p.num_threads() <= 1
            if p.name() == "java" and not exited:
                out.append(p)
        except psutil.Error:
            continue
    return out


REQUIRE_ROOT = "ARFL_REQUIRE_ROOT"
"""Set to 1 (``.ci/run`` does): a test that needs root or a cgroup controller fails without
it instead of skipping, so CI never passes by skipping what it should have run."""


def skip_unless_required(reason: str) -> NoReturn:
    """Skip the running test for ``reason`` (something this host lacks), or fail it under
    ``ARFL_REQUIRE_ROOT=1``."""
    if os.environ.get(REQUIRE_ROOT) == "1":
        pytest.fail(f"{REQUIRE_ROOT}=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture
def cpu_hierarchy() -> CpuHierarchy:
    """The host's cgroup cpu controller (skipped without one, or failed: above)."""
    try:
        return detect()
    except FaultError as e:
        skip_unless_required(str(e))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.needs_root(reason=...)``: run as root, else skip (or fail, above)."""
    mark = item.get_closest_marker("needs_root")
    if mark is not None and os.geteuid() != 0:
        reason = mark.kwargs.get("reason") or (mark.args[0] if mark.args else "needs root")
        skip_unless_required(f"not root: {reason}")


@pytest.fixture(scope="session", autouse=True)
def _no_java_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the session if a JVM it started still runs at the end (and stop it, by pid)."""
    base = tmp_path_factory.getbasetemp()
    me = psutil.Process()
    before = {p.pid for p in _our_java(base, me)}
    yield
    deadline = time.monotonic() + 10
    left = [p for p in _our_java(base, me) if p.pid not in before]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in _our_java(base, me) if p.pid not in before and p.is_running()]
    if not left:
        return
    lines = []
    for p in left:
        try:
            lines.append(f"pid {p.pid}: {' '.join(p.cmdline())[:200]}")
            p.kill()
        except psutil.Error:
            continue
    pytest.fail("java processes left running by the test session:\n" + "\n".join(lines))


@pytest.fixture(scope="session", autouse=True)
def _isolated_state(
    tmp_path_factory: pytest.TempPathFactory, _no_java_left_behind: None
) -> Iterator[Path]:
    """Point ``ARFL_STATE_DIR`` at a temporary directory: no test touches a user's stack.

    At the end, whatever runs from ``$ARFL_STATE_DIR/stack`` (the session stack, or one that
    code under test started through ``arfl.stack.resolve``) is stopped by its pids.
    """
    path = tmp_path_factory.mktemp("arfl-state")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ARFL_STATE_DIR", str(path))
        try:
            yield path
        finally:
            down(path / "stack")


@pytest.fixture(scope="session")
def stack_harness(_isolated_state: Path) -> Iterator[EmbeddedStack]:
    """The session's embedded stack (ZooKeeper + Kafka on free ports), started on first use.

    It lives in ``$ARFL_STATE_DIR/stack``, the default place, so code under test that calls
    ``arfl.stack.resolve`` for an embedded stack finds and reuses it.
    """
    harness = EmbeddedStack(_isolated_state / "stack")
    harness.start()
    try:
        yield harness
    finally:
        harness.stop()


@pytest.fixture(scope="session")
def stack(stack_harness: EmbeddedStack) -> StackInfo:
    """Addresses of the session's embedded stack (``.kafka``, ``.zookeeper``)."""
    assert stack_harness.info is not None
    return stack_harness.info


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (and this run)."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:100]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"


def pytest_report_header(config: pytest.Config) -> str:
    """Say where the jars come from: a slow first run is then no surprise."""
    return f"arfl cache: {os.environ.get('ARFL_CACHE_DIR', '~/.cache/arfl (default)')}"
