"""The names every process of a run agrees on: the source format, ZooKeeper paths, topics.

Deploy writes them into ``state.json``, the replicas use them to find each other, the faults
and the tests read them back; each is spelled here once. (A replica's output topic is
:func:`arfl.run.records.replica_topic`, next to the record format it carries.)
"""

from __future__ import annotations

import re

SOURCE_NAME = "arfl-kafka"
"""The Spark data-source format of arfl's Kafka source (``spark.readStream.format(...)``)."""


def leader_path(pipeline: str, run_id: str) -> str:
    """ZooKeeper path of a run's leader election (active-leader): scoped to the run like its
    decision log, so two runs of one spec on a shared stack never join one election."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return f"/arfl/{pipeline}/{safe}/leader"


def decision_topic(pipeline: str, run_id: str) -> str:
    """Name of a run's decision log (unique per run: old decisions must never be replayed)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"arfl.{pipeline}.{run_id}.decisions")
    return safe[:249]
