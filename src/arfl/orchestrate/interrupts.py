"""Stopping must not be interrupted: Ctrl-C and SIGTERM are held off while arfl stops its
processes.

The first Ctrl-C makes a deployment stop everything it started. A second one, pressed while
that stop waits for a driver to exit, would otherwise raise ``KeyboardInterrupt`` inside the
stop and abandon the drivers, executors and merger not stopped yet: they run in sessions of
their own and nothing else would stop them. :class:`DeferredInterrupts` notes such signals
instead; the stop finishes (it is bounded by its grace periods), and the caller decides what
the noted signals mean (see :attr:`DeferredInterrupts.received`).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

HELD = (signal.SIGINT, signal.SIGTERM)


class DeferredInterrupts:
    """While active, SIGINT and SIGTERM are noted in :attr:`received` instead of raising.

    Only the main thread can install signal handlers; elsewhere this does nothing (a signal is
    always handled in the main thread anyway). Nested uses are fine: an inner one passes what
    it noted on to the outer one when it ends.

    Example::

        with DeferredInterrupts() as held:
            runner.stop()
        if held.received:
            journal.write("interrupt-ignored", ...)
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self.nested = False
        """Whether an outer :class:`DeferredInterrupts` was active (it gets what this one
        noted, and is the one to report it)."""
        self._old: dict[int, object] = {}

    def _note(self, signum: int, frame: FrameType | None) -> None:
        del frame
        self.received.append(signum)

    def __enter__(self) -> DeferredInterrupts:
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in HELD:
            old = signal.getsignal(sig)
            if old is None:  # installed outside Python: it cannot be put back, so leave it
                continue
            self._old[sig] = old
            self.nested = self.nested or isinstance(getattr(old, "__self__", None), type(self))
            signal.signal(sig, self._note)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]  # what getsignal returned
            outer = getattr(old, "__self__", None)
            if isinstance(outer, DeferredInterrupts):
                outer.received += [s for s in self.received if s == sig]
        self._old.clear()
