"""Ticks while a deployment is busy outside its watch (start-up, stop).

The watch hands the live view a :class:`~arfl.orchestrate.watch.Tick` twice a second; before
it (stack, topics, replicas, standbys) and after it (stopping, the independent check) the
deployment's steps block for seconds to minutes. :func:`heartbeat` hands the view a tick of
what the deployment is doing at once and then once per interval, from a daemon thread, so
that the view and the plain lines keep saying it::

    with heartbeat(on_tick, deployment.tick):
        deployment.start_replicas()
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from arfl.orchestrate.watch import Tick

HEARTBEAT_S = 1.0
"""How often a tick comes outside the watch."""


@contextlib.contextmanager
def heartbeat(
    on_tick: Callable[[Tick], None] | None,
    tick: Callable[[], Tick],
    interval_s: float = HEARTBEAT_S,
) -> Iterator[None]:
    """Call ``on_tick(tick())`` at once and every ``interval_s`` until the ``with`` ends.

    Args:
        on_tick: the live view's callback (None: nothing happens, no thread).
        tick: what the deployment is doing now.
        interval_s: the period.
    """
    if on_tick is None:
        yield
        return
    on_tick(tick())
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval_s):
            on_tick(tick())

    thread = threading.Thread(target=run, name="arfl-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
