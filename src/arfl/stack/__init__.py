"""The embedded ZooKeeper + Kafka (KRaft) stack: install, start, stop, status, topics.

Typical use::

    from arfl import stack

    info = stack.up()                       # or stack.resolve(spec.stack)
    stack.topics.ensure_topic(info.kafka, "clicks", 4, log_append_time=True)
    ...
    stack.down()
"""

from __future__ import annotations

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
