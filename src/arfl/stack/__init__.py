"""The embedded ZooKeeper + Kafka (KRaft) stack: install, start, stop, status, topics.

Typical use::

    from arfl import stack

    info = stack.up()                       # or stack.resolve(spec.stack)
    stack.topics.ensure_topic(info.kafka, "clicks", 4, log_append_time=True)
    ...
    stack.down()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arfl.stack import topics
    from arfl.stack.health import wait_kafka, wait_zookeeper
    from arfl.stack.install import Installed, ensure_installed
    from arfl.stack.lifecycle import (
        ServiceStatus,
        StackInfo,
        down,
        resolve,
        running_info,
        status,
        up,
    )

_WHERE = {
    "topics": "arfl.stack.topics",
    "wait_kafka": "arfl.stack.health",
    "wait_zookeeper": "arfl.stack.health",
    "Installed": "arfl.stack.install",
    "ensure_installed": "arfl.stack.install",
    **dict.fromkeys(
        ["ServiceStatus", "StackInfo", "down", "resolve", "running_info", "status", "up"],
        "arfl.stack.lifecycle",
    ),
}


def __getattr__(name: str) -> Any:
    """The package's names, imported on first use: a merger or injector that needs only
    :mod:`arfl.stack.clients` or :mod:`arfl.stack.topics` starts without the lifecycle and the
    spec models (~0.3 s of a merger's restart, docs/benchmarks.md)."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'arfl.stack' has no attribute {name!r}")
    module = importlib.import_module(where)
    value = module if name == "topics" else getattr(module, name)
    globals()[name] = value
    return value


__all__ = [
    "Installed",
    "ServiceStatus",
    "StackInfo",
    "down",
    "ensure_installed",
    "resolve",
    "running_info",
    "status",
    "topics",
    "up",
    "wait_kafka",
    "wait_zookeeper",
]
