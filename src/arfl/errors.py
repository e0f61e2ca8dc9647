"""One error hierarchy; the CLI turns each class into a stable exit code.

Exit codes (documented in the README):
    0  success
    1  an SLO was breached (``arfl report``)
    2  invalid spec or command-line usage (``SpecError``)
    3  the stack (ZooKeeper, Kafka, Java, downloads) failed (``StackError``)
    4  a deployment failed (``DeployError``)
    5  a fault could not be injected or reverted (``FaultError``)
    6  a report could not be produced (``ReportError``)
    130 interrupted (Ctrl-C)
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Stable process exit codes."""

    OK = 0
    SLO_BREACHED = 1
    SPEC = 2
    STACK = 3
    DEPLOY = 4
    FAULT = 5
    REPORT = 6
    INTERRUPTED = 130


class ArflError(Exception):
    """Base class for every error arfl reports to a user (no traceback unless --debug)."""

    exit_code: ExitCode = ExitCode.DEPLOY


class SpecError(ArflError):
    """A spec (TOML file) is invalid; ``problems`` lists every problem with its key path."""

    exit_code = ExitCode.SPEC

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = problems or []

    def __str__(self) -> str:
        head = super().__str__()
        if not self.problems:
            return head
        return head + "\n" + "\n".join(f"  {p}" for p in self.problems)


class StackError(ArflError):
    """ZooKeeper, Kafka, Java or a download failed."""

    exit_code = ExitCode.STACK


class DeployError(ArflError):
    """A deployment (replicas, injector, merger) failed."""

    exit_code = ExitCode.DEPLOY


class FaultError(ArflError):
    """A fault could not be injected or reverted."""

    exit_code = ExitCode.FAULT


class ReportError(ArflError):
    """A report could not be produced from a run directory."""

    exit_code = ExitCode.REPORT
