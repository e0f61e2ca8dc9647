"""Is ZooKeeper / Kafka answering? Checked through their real clients (kazoo, confluent-kafka)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from arfl.errors import StackError
from arfl.processes import wait_until

# The clients log every refused connection while a server is still starting; those lines are
# expected during a wait, so they go to a logger that swallows them.
_quiet = logging.getLogger("arfl.stack.health.quiet")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def split_hostport(addr: str) -> tuple[str, int]:
    """Split ``host:port`` (the first entry of a comma-separated list).

    Raises:
        StackError: if the address has no numeric port.
    """
    first = addr.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise StackError(f"bad address {addr!r}: expected host:port")
    return host.strip("[]"), int(port)


def tcp_open(addr: str, timeout: float = 1.0) -> bool:
    """Whether a TCP connection to the first ``host:port`` of ``addr`` succeeds."""
    try:
        host, port = split_hostport(addr)
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except (OSError, StackError):
        return False


def zookeeper_ruok(connect: str, timeout: float = 2.0) -> bool:
    """Whether ZooKeeper answers the ``ruok`` four-letter word with ``imok``."""
    try:
        host, port = split_hostport(connect)
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except (OSError, StackError):
        return False


def zookeeper_ok(connect: str, timeout: float = 2.0) -> bool:
    """Whether a kazoo session can be opened and ``/`` read within ``timeout`` seconds."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    if not tcp_open(connect, timeout):
        return False
    zk = KazooClient(hosts=connect, timeout=max(timeout, 1.0), logger=_quiet)
    try:
        zk.start(timeout=timeout)
        zk.get("/")
        return True
    except (KazooException, KazooTimeoutError, OSError):
        return False
    finally:
        try:
            zk.stop()
        finally:
            zk.close()


def kafka_ok(bootstrap: str, timeout: float = 2.0) -> bool:
    """Whether Kafka answers a metadata request (AdminClient ``list_topics``) with a broker."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not tcp_open(bootstrap, timeout):
        return False
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000)}, logger=_quiet
    )
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(md.brokers)


def _wait(
    what: str,
    check: Callable[[float], bool],
    timeout: float,
    alive: Callable[[], None] | None,
    hint: str,
) -> None:
    deadline = time.monotonic() + timeout

    def attempt() -> bool:
        if alive is not None:
            alive()
        # One attempt may take up to 2 s, never much beyond the deadline.
        return check(max(0.5, min(2.0, deadline - time.monotonic())))

    try:
        wait_until(attempt, timeout_s=timeout, interval_s=0.2, what=what)
    except TimeoutError:
        raise StackError(f"{what} not reachable after {timeout:.0f}s; {hint}") from None


_HINT = "run 'arfl stack up' or set stack.kafka"


def wait_kafka(
    bootstrap: str,
    timeout: float = 60.0,
    *,
    alive: Callable[[], None] | None = None,
    hint: str = _HINT,
) -> None:
    """Wait until Kafka at ``bootstrap`` answers a metadata request.

    Args:
        bootstrap: ``host:port[,host:port...]``.
        timeout: seconds to wait.
        alive: called between attempts; raises when the server process died (fail fast).
        hint: what to do next, appended to the error message.

    Raises:
        StackError: ``kafka at <bootstrap> not reachable after <timeout>s; <hint>``.
    """
    _wait(f"kafka at {bootstrap}", lambda t: kafka_ok(bootstrap, t), timeout, alive, hint)


def wait_zookeeper(
    connect: str,
    timeout: float = 30.0,
    *,
    alive: Callable[[], None] | None = None,
    hint: str = "run 'arfl stack up' or set stack.zookeeper",
) -> None:
    """Wait until ZooKeeper at ``connect`` opens a session and serves ``/`` (kazoo).

    Args:
        connect: ``host:port[,host:port...]``.
        timeout: seconds to wait.
        alive: called between attempts; raises when the server process died (fail fast).
        hint: what to do next, appended to the error message.

    Raises:
        StackError: ``zookeeper at <connect> not reachable after <timeout>s; <hint>``.
    """
    _wait(f"zookeeper at {connect}", lambda t: zookeeper_ok(connect, t), timeout, alive, hint)
