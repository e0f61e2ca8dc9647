"""Defaults that a spec model and a child process's config share, written once here (a plain
module: the merger and the injector import it without the spec models)."""

from __future__ import annotations

INJECTOR_LINGER_MS = 2.0
"""The injector's and the replayer's producer ``linger.ms`` (``[workload] linger``; their
configs' ``linger_ms``)."""

MERGER_FETCH_WAIT_MS = 5
"""The merger consumer's ``fetch.wait.max.ms`` (``[merger] fetch_wait``; ``fetch_wait_ms``)."""

MERGER_LINGER_MS = 1.0
"""The merger producer's ``linger.ms`` on the final topic (``[merger] linger``;
``linger_ms``)."""

AUTO_WARMUP_FLOOR_S = 5.0
"""The shortest automatic warm-up (``workload.warmup`` unset): the injector's late events
start after it (``configs/lateness``), and the report's steady state never starts earlier."""
