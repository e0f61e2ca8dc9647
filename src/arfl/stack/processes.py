"""The stack's processes: records of (pid, create time) in ``stack.json``, port ownership.

A pid alone is not an identity: after a crash and a reboot (or simply a long time), the pid in a
pid file can belong to an unrelated process. Every record therefore keeps the process's create
time as psutil reports it, and a process is "ours" only while both match. Starting and stopping
is done by :mod:`arfl.processes`; this module keeps the records and the stack's messages.
"""

from __future__ import annotations

import errno
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from arfl.errors import StackError
from arfl.processes import ManagedProcess, ProcessId, create_time, stop_pid


@dataclass(frozen=True)
class ProcessRecord(ProcessId):
    """A process arfl started, as written to ``stack.json``: its identity and command line."""

    cmdline: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form (the inverse of :meth:`from_json`)."""
        return {"pid": self.pid, "create_time": self.create_time, "cmdline": list(self.cmdline)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessRecord:
        """Build a record from its JSON form.

        Raises:
            StackError: if a key is missing or has the wrong type.
        """
        try:
            return cls(
                pid=int(data["pid"]),
                create_time=float(data["create_time"]),
                cmdline=[str(a) for a in data.get("cmdline", [])],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise StackError(f"bad process record {data!r}: {e}") from e


def record_of(pid: int) -> ProcessRecord:
    """Return the record (create time, command line) of a live process.

    Raises:
        StackError: if there is no such process.
    """
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            return ProcessRecord(pid=pid, create_time=create_time(p), cmdline=p.cmdline())
    except psutil.Error as e:
        raise StackError(f"process {pid} vanished right after it was started: {e}") from e


def find(record: ProcessRecord) -> psutil.Process | None:
    """Return the live process that ``record`` describes, or None.

    None when the pid is gone, has exited (a zombie not yet reaped), or now belongs to another
    process (its create time differs), so a recycled pid is never mistaken for ours.
    """
    return record.find()


def is_alive(record: ProcessRecord) -> bool:
    """Whether the process of ``record`` still runs (same pid and create time)."""
    return find(record) is not None


def stop(record: ProcessRecord, timeout: float = 20.0) -> bool:
    """Stop the process of ``record``: SIGTERM, then SIGKILL after ``timeout`` seconds.

    See :func:`arfl.processes.stop_pid` (exit is detected by polling, zombies are reaped).

    Args:
        record: the process to stop; nothing is signalled unless pid and create time match.
        timeout: seconds to wait for a clean exit after SIGTERM.

    Returns:
        True if a process was stopped, False if it was not running (any more).

    Raises:
        StackError: if the process survives SIGKILL.
    """
    if not stop_pid(record.pid, record.create_time, grace_s=timeout, tree=False):
        return False
    if find(record) is not None:
        raise StackError(f"process {record.pid} survived SIGKILL for 10s; kill it by hand")
    return True


class ExitedAtStart(StackError):
    """A process :func:`spawn` started was gone before its record could be taken."""


def spawn(
    cmd: Sequence[str], log: Path, cwd: Path, env: dict[str, str] | None = None, nice: int = 0
) -> ProcessRecord:
    """Start ``cmd`` in the background, in its own session, output appended to ``log``, at
    niceness ``nice`` (:meth:`ManagedProcess.start`).

    Its own session keeps a Ctrl-C in the terminal that ran ``arfl`` from reaching it: the
    stack outlives the command that started it and is stopped by ``arfl stack down``.

    Returns:
        The record (pid, create time) of the started process.

    Raises:
        ExitedAtStart: it exited at once.
        StackError: if the executable cannot be started.
    """
    try:
        proc = ManagedProcess.start(Path(cmd[0]).name, cmd, log, env=env, cwd=cwd, nice=nice)
    except OSError as e:
        raise StackError(f"cannot start {cmd[0]}: {e}") from e
    try:
        return record_of(proc.pid)
    except StackError:
        # It exited at once (a JVM refusing its options does): reap it and say so; the caller
        # names the service and shows its log.
        try:
            code = proc.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            code = None
        raise ExitedAtStart(f"{cmd[0]} exited as soon as it started (exit code {code})") from None


def port_is_free(host: str, port: int) -> bool:
    """Whether a TCP server could listen on ``host:port`` now.

    SO_REUSEADDR is set, as servers do, so that connections in TIME_WAIT do not count.
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise StackError(f"cannot bind {host}:{port}: {e}; check --host") from e
    return True


def port_owner(host: str, port: int) -> psutil.Process | None:
    """Return the process listening on ``host:port`` (or on the wildcard address), if visible."""
    try:
        conns = psutil.net_connections(kind="inet")
    except psutil.Error:
        return None
    for c in conns:
        if c.status != psutil.CONN_LISTEN or not c.laddr or c.laddr.port != port:
            continue
        if c.laddr.ip not in (host, "0.0.0.0", "::", "::ffff:" + host):
            continue
        if c.pid is None:
            return None
        try:
            return psutil.Process(c.pid)
        except psutil.Error:
            return None
    return None


def describe(p: psutil.Process | None) -> str:
    """Return ``"pid N: cmd"`` for a message, shortened to a readable length."""
    if p is None:
        return "owner not visible"
    try:
        cmd = " ".join(p.cmdline()) or p.name()
    except psutil.Error:
        cmd = "?"
    if len(cmd) > 120:
        cmd = cmd[:117] + "..."
    return f"pid {p.pid}: {cmd}"


def check_port(host: str, port: int, flag: str) -> None:
    """Raise a StackError naming the port and its owner if ``host:port`` is taken.

    Args:
        host: the address the service will listen on.
        port: the port it will listen on.
        flag: the command-line option that chooses another port, for the message.
    """
    if port_is_free(host, port):
        return
    owner = port_owner(host, port)
    raise StackError(
        f"port {port} on {host} is taken by another process ({describe(owner)}); "
        f"stop it or pass {flag}"
    )
