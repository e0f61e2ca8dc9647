"""``[source] options`` and ``[sink] options``: the Kafka client settings a spec passes to
Spark's Kafka source and sink (``kafka.*`` keys), and the strings Spark takes."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

_ARFL_KAFKA_KEYS = frozenset({"kafka.bootstrap.servers"})


def _check_kafka_options(
    v: dict[str, str | int | float | bool],
) -> dict[str, str | int | float | bool]:
    """Kafka client settings passed to Spark as ``kafka.*`` options: only those, and not the
    ones arfl sets itself."""
    bad = sorted(k for k in v if not k.startswith("kafka.") or k == "kafka.")
    if bad:
        raise ValueError(
            f"only Kafka client settings, spelled 'kafka.<setting>' as Spark takes them: {bad}"
        )
    own = sorted(k for k in v if k in _ARFL_KAFKA_KEYS)
    if own:
        raise ValueError(f"set by arfl (the run's Kafka): {own}")
    return v


KafkaOptions = Annotated[
    dict[str, str | int | float | bool],
    AfterValidator(_check_kafka_options),
    Field(json_schema_extra={"constraint": "kafka.* keys only, not kafka.bootstrap.servers"}),
]
"""``[source] options`` / ``[sink] options``: ``kafka.*`` client settings."""


def option_strings(v: dict[str, str | int | float | bool]) -> dict[str, str]:
    """Spec options (``[source]``/``[sink] options``, ``[spark] conf``) as the strings Spark
    takes (TOML booleans lower-case)."""
    return {k: str(x).lower() if isinstance(x, bool) else str(x) for k, x in v.items()}


def keeps_partition_order(
    v: dict[str, str | int | float | bool],
) -> dict[str, str | int | float | bool]:
    """The replicas' sink must keep each output partition in write order: the merger's dedup
    relies on it (docs/design.md, "Bounded dedup"). A producer without idempotence that
    retries with several requests in flight can reorder."""
    idempotent = str(v.get("kafka.enable.idempotence", "true")).lower() != "false"
    in_flight = str(v.get("kafka.max.in.flight.requests.per.connection", "5"))
    if not idempotent and in_flight != "1":
        raise ValueError(
            "kafka.enable.idempotence = false keeps each partition's order only with "
            "kafka.max.in.flight.requests.per.connection = 1 (the merger relies on it); "
            "set that too, or drop kafka.enable.idempotence"
        )
    return v
