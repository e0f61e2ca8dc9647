"""Ticks while a deployment is busy outside its watch (start-up, stop).

The watch hands the live view a :class:`~arfl.orchestrate.watch.Tick` twice a second; before
it (stack, topics, replicas, standbys) and after it (stopping, the independent check) the
deployment's steps block for seconds to minutes. :class:`Heartbeat` hands the view a tick of
what the deployment is doing at once and then once per interval, from a daemon thread, so
that the view and the plain lines keep saying it::

    with Heartbeat(on_tick, deployment.tick):
        deployment.start_replicas()
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from arfl.orchestrate.watch import Tick

HEARTBEAT_S = 1.0
"""How often a tick comes outside the watch."""


class Heartbeat:
    """Calls ``on_tick(tick())`` at once and every ``interval_s`` until the ``with`` ends.

    Args:
        on_tick: the live view's callback (None: nothing happens).
        tick: what the deployment is doing now.
        interval_s: the period.
    """

    def __init__(
        self,
        on_tick: Callable[[Tick], None] | None,
        tick: Callable[[], Tick],
        interval_s: float = HEARTBEAT_S,
    ) -> None:
        self._on_tick = on_tick
        self._tick = tick
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        if self._on_tick is not None:
            self._thread = threading.Thread(target=self._run, name="arfl-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        assert self._on_tick is not None
        while True:
            self._on_tick(self._tick())
            if self._stop.wait(self._interval_s):
                return
