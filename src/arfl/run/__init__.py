"""The run directory every process shares: its layout and JSON/JSONL helpers (``rundir``), the
record formats on Kafka (``records``), the names the processes agree on (``names``: source
format, leader path, decision topic), Spark progress parsing (``progress``) and the streams
components append to (``streams``: ``monitor.jsonl``, ``injector.jsonl``). Imports nothing of
arfl above it."""
