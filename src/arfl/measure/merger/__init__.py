"""The merger: first copy of each result wins; end-to-end latency is measured here.

It reads every partition of every replica's output topic (``records.replica_topic(sink, i)``)
from its beginning, by explicit assignment: no consumer group, so no rebalance can ever make it
re-read. It keeps the **first** copy of each result id and writes it unchanged to the final
sink topic. For every first copy it records two latencies into per-second HdrHistograms:

* ``receive wall time - src_ts`` (the newest contributing event's *intended* send time), the
  headline reading, written to ``latency.hlog``;
* ``receive wall time - sent_ts`` (its *actual* send time), written to ``latency-sent.hlog``;
  results without ``sent_ts`` are not recorded there, only counted.

Once a second it appends a line to ``monitor.jsonl`` (format in :mod:`arfl.run.streams`).

Dedup memory is bounded by channels and time, not by the run's length
(:class:`~arfl.measure.merger.core.DedupState`): a forwarded id stays in exact memory for
:data:`~arfl.measure.merger.core.RECENT_S` and until every active replica is past it in its
channel (input and output partition; a window's output partition and end), then a per-channel
floor decides its later copies (counted as ``uncompared``: no hash left to compare). Why no
duplicate gets through and no first copy is dropped: docs/design.md, "Bounded dedup".

Given the pid and create time of its owner (the deploy process), the merger ends by itself
(flushes, writes ``merger.json``, journals ``merger-orphaned``) within about a second of the
owner's death, so that a ``kill -9`` of arfl never leaves it running.

Copies of one id with different content hashes are **divergent**: counted, and journaled
(``divergence`` events, the first :data:`MAX_JOURNALED_DIVERGENCES` of them). Records that
are not result records are counted as ``bad`` and skipped.

The core (:class:`~arfl.measure.merger.core.MergeCore`) is pure; its Kafka clients are in
:mod:`~arfl.measure.merger.kafka`, the process (:class:`~arfl.measure.merger.process.Merger`) in
:mod:`~arfl.measure.merger.process`. Run as a process with a
:class:`~arfl.measure.merger.config.MergerConfig` as JSON (deploy writes
``<run>/config/merger.json``)::

    python -m arfl.measure.merger --config runs/clicks-20261125-213000/config/merger.json
"""
