"""An embedded ZooKeeper + Kafka on free ports, for tests (like ``kazoo.testing``).

::

    with EmbeddedStack(tmp_path / "stack") as info:
        ensure_topic(info.kafka, "t", 1)
"""

from __future__ import annotations

import socket
from pathlib import Path
from types import TracebackType

from arfl.errors import StackError
from arfl.stack import lifecycle
from arfl.stack.lifecycle import StackInfo
from arfl.stack.processes import ProcessRecord

_ATTEMPTS = 3


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports that are free on ``host`` right now (the kernel picks them)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class EmbeddedStack:
    """Start ZooKeeper and Kafka in ``state`` on free ports; stop them (by pid) on exit.

    Attributes:
        state: the stack's state directory (data, logs, ``stack.json``).
        info: the addresses, once started.
    """

    def __init__(self, state: Path, host: str = "127.0.0.1", timeout: float = 120.0) -> None:
        """Prepare (nothing starts before ``__enter__``/:meth:`start`).

        Args:
            state: an empty (temporary) directory for the stack's files.
            host: address to listen on.
            timeout: seconds to wait for both services to answer.
        """
        self.state = state
        self.host = host
        self.timeout = timeout
        self.info: StackInfo | None = None

    def start(self) -> StackInfo:
        """Start the stack; retried on other ports if a free port was taken meanwhile.

        A stack already running from ``state`` (started by code under test) is adopted.

        Raises:
            StackError: if it cannot start.
        """
        running = lifecycle.running_info(self.state)
        if running is not None:
            st = lifecycle.load_state(lifecycle.layout_of(self.state))
            assert st is not None
            self.info = lifecycle.up(
                st.host,
                st.zk_port,
                st.kafka_port,
                st.controller_port,
                state=self.state,
                timeout=self.timeout,
            )
            return self.info
        last: StackError | None = None
        for _ in range(_ATTEMPTS):
            zk, kafka, controller = free_ports(3, self.host)
            try:
                self.info = lifecycle.up(
                    self.host, zk, kafka, controller, state=self.state, timeout=self.timeout
                )
                return self.info
            except StackError as e:
                if "is taken by another process" not in str(e):
                    raise
                last = e
        assert last is not None
        raise last

    def processes(self) -> dict[str, ProcessRecord]:
        """The stack's processes (service name -> pid and create time)."""
        st = lifecycle.load_state(lifecycle.layout_of(self.state))
        return dict(st.services) if st else {}

    def stop(self) -> list[str]:
        """Stop the stack's processes; data stays in ``state``."""
        self.info = None
        return lifecycle.down(self.state)

    def __enter__(self) -> StackInfo:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
