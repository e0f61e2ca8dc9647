"""``[source] options`` and ``[sink] options``: Kafka client settings for Spark's Kafka source
and sink in the replicas, checked with their key paths."""

from __future__ import annotations

from typing import Any

import pytest

from arfl.configs.kafka_options import option_strings
from arfl.configs.load import parse_spec
from arfl.errors import SpecError


def _raw(mode: str = "active", **sections: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "k",
        "source": {"topic": "in", "partitions": 2},
        "sink": {"topic": "out"},
        "replication": {"mode": mode, "replicas": 2},
    }
    for name, extra in sections.items():
        raw[name] = raw[name] | extra
    return raw


def test_kafka_settings_pass_as_strings() -> None:
    spec = parse_spec(
        _raw(
            source={"options": {"kafka.fetch.max.wait.ms": 5, "kafka.check.crcs": False}},
            sink={"options": {"kafka.linger.ms": "2"}},
        )
    )
    assert option_strings(spec.source.options) == {
        "kafka.fetch.max.wait.ms": "5",
        "kafka.check.crcs": "false",
    }
    assert option_strings(spec.sink.options) == {"kafka.linger.ms": "2"}


def test_every_bad_option_is_named_with_its_key_path() -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(
            _raw(
                source={"options": {"startingOffsets": "latest"}},
                sink={"options": {"kafka.bootstrap.servers": "elsewhere:9092"}},
            )
        )
    text = str(e.value)
    assert "source.options" in text and "startingOffsets" in text
    assert "sink.options" in text and "set by arfl" in text


def test_source_options_are_refused_where_arfl_reads_the_input() -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(_raw("active-leaderless", source={"options": {"kafka.fetch.max.wait.ms": "5"}}))
    assert "source.options" in str(e.value) and "arfl's own source" in str(e.value)
    # The sink is Spark's Kafka sink in every mode.
    parse_spec(_raw("active-leaderless", sink={"options": {"kafka.linger.ms": "1"}}))


def test_a_sink_that_could_reorder_a_partition_is_refused() -> None:
    # The merger's dedup needs each output partition in a replica's write order.
    with pytest.raises(SpecError) as e:
        parse_spec(_raw(sink={"options": {"kafka.enable.idempotence": False}}))
    assert "sink.options" in str(e.value) and "max.in.flight" in str(e.value)
    one = {"kafka.enable.idempotence": "false", "kafka.max.in.flight.requests.per.connection": 1}
    parse_spec(_raw(sink={"options": one}))
