"""A replica's Spark configuration: arfl's defaults, then the spec's, then the runner's."""

from __future__ import annotations

from typing import Any

from arfl.configs.spec import parse_spec
from arfl.replica.driver import C1_ONLY_JIT, DriverConfig, spark_conf


def _conf(spark: dict[str, Any]) -> dict[str, str]:
    spec = parse_spec(
        {"name": "c", "source": {"topic": "a"}, "sink": {"topic": "b"}, "spark": spark}, "c.toml"
    )
    cfg = DriverConfig(
        spec=spec.model_dump(mode="json", by_alias=True),
        replica=1,
        bootstrap="127.0.0.1:9",
        output_topic="b.r1",
        checkpoint_dir="/tmp/ck",
        progress_file="/tmp/p",
        app_id_file="/tmp/a",
        master=spec.spark.master,
        conf={"spark.sql.shuffle.partitions": "3"},
    )
    return spark_conf(cfg, spec)


def test_replica_jvms_use_c1_only_jit_by_default() -> None:
    conf = _conf({})
    assert conf["spark.driver.extraJavaOptions"] == C1_ONLY_JIT
    assert conf["spark.executor.extraJavaOptions"] == C1_ONLY_JIT
    assert conf["spark.executor.memory"] == "512m"  # local-cluster: executor JVMs
    assert conf["spark.sql.shuffle.partitions"] == "3"  # the runner's value wins


def test_the_spec_can_have_the_jvm_default_back() -> None:
    conf = _conf({"master": "local[2]", "conf": {"spark.executor.extraJavaOptions": ""}})
    assert conf["spark.executor.extraJavaOptions"] == ""
    assert conf["spark.driver.extraJavaOptions"] == C1_ONLY_JIT
    assert "spark.executor.memory" not in conf
