"""A replica's Spark configuration: arfl's defaults, then the spec's, then the runner's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arfl.configs.load import parse_spec
from arfl.configs.realtime import SHUFFLE_FLUSH_CONF, SHUFFLE_FLUSH_MS
from arfl.replica import driver
from arfl.replica.app import DriverConfig, spark_conf
from arfl.replica.sparkenv import C1_ONLY_JIT, EXECUTOR_DEFAULT_JAVA_OPTIONS, SCRATCH_ENV


def _conf(spark: dict[str, Any], replication: dict[str, Any] | None = None) -> dict[str, str]:
    raw: dict[str, Any] = {"name": "c", "source": {"topic": "a"}, "sink": {"topic": "b"}}
    raw["spark"] = spark
    if replication:
        raw["replication"] = replication
    spec = parse_spec(raw, "c.toml")
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


def test_a_real_time_replica_flushes_its_streaming_shuffle_within_a_few_ms() -> None:
    realtime = {"mode": "active", "replicas": 2, "trigger": "realtime"}
    assert _conf({}, realtime)[SHUFFLE_FLUSH_CONF] == str(SHUFFLE_FLUSH_MS)
    assert SHUFFLE_FLUSH_MS < 50  # Spark's own default, which this replaces
    # micro-batch has no streaming shuffle: Spark's default stays
    assert SHUFFLE_FLUSH_CONF not in _conf({})
    # the spec's [spark] conf wins
    own = _conf({"conf": {SHUFFLE_FLUSH_CONF: "20"}}, realtime)
    assert own[SHUFFLE_FLUSH_CONF] == "20"


def _spec(steps: list[dict[str, Any]], conf: dict[str, Any] | None = None, **repl: Any) -> Any:
    raw: dict[str, Any] = {
        "name": "c",
        "source": {"topic": "a", "event_time": "ts"},
        "sink": {"topic": "b"},
        "steps": steps,
        "spark": {"conf": conf or {}},
    }
    if repl:
        raw["replication"] = repl
    return parse_spec(raw, "c.toml")


def test_async_progress_only_for_stateless_micro_batches_and_never_passed_to_spark() -> None:
    from arfl.configs.spec import ASYNC_PROGRESS_KEY
    from arfl.replica.app import async_progress, writer_options

    on = {ASYNC_PROGRESS_KEY: True}
    per_record = [{"filter": "amount > 10"}, {"select": ["user"]}]
    window = {"window": {"size": "1s", "key": "user", "agg": {"n": "count(*)"}}}
    assert writer_options(_spec(per_record, on)) == {"asyncProgressTrackingEnabled": "true"}
    assert not async_progress(_spec(per_record, {ASYNC_PROGRESS_KEY: "false"}))
    assert not async_progress(_spec([*per_record, window], on))  # stateful
    assert not async_progress(_spec([{"transform": "m:f"}], on))  # may be stateful
    assert not async_progress(_spec(per_record, on, trigger="realtime"))
    assert ASYNC_PROGRESS_KEY not in _conf({"conf": on})


def test_the_rehearsal_switch_is_arfls_not_sparks() -> None:
    from arfl.configs.spec import REHEARSAL_KEY

    conf = _conf({"conf": {REHEARSAL_KEY: False, "spark.x": "1"}})
    assert REHEARSAL_KEY not in conf and conf["spark.x"] == "1"
    raw = {"name": "c", "source": {"topic": "a"}, "sink": {"topic": "b"}}
    assert parse_spec(raw, "c.toml").spark.flag(REHEARSAL_KEY, True)  # on by default
    for off in (False, "false", "FALSE"):
        spec = parse_spec({**raw, "spark": {"conf": {REHEARSAL_KEY: off}}}, "c.toml")
        assert not spec.spark.flag(REHEARSAL_KEY, True), off


@pytest.mark.parametrize(
    ("mode", "replicas", "default"),
    [("none", 1, True), ("active", 2, True), ("passive", 1, False),
     ("active-leader", 2, True), ("active-leaderless", 2, True)],
)  # fmt: skip
def test_async_progress_is_on_by_default_where_a_restart_may_replay(
    mode: str, replicas: int, default: bool
) -> None:
    from arfl.configs.spec import ASYNC_PROGRESS_KEY
    from arfl.replica.app import async_progress

    per_record = [{"filter": "amount > 10"}]
    assert async_progress(_spec(per_record, mode=mode, replicas=replicas)) == default
    off = {ASYNC_PROGRESS_KEY: "false"}
    assert not async_progress(_spec(per_record, off, mode=mode, replicas=replicas))


def test_the_executors_temp_files_go_to_the_drivers_scratch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A SIGKILLed executor never deletes what it extracted into java.io.tmpdir (Kafka's lz4
    # library): in the driver's scratch it goes with the run's SPARK_HOME.
    monkeypatch.setenv(SCRATCH_ENV, "/tmp/arfl-spark-abc")
    conf = _conf({"conf": {"spark.executor.extraJavaOptions": "-Dx=1"}})
    assert conf[EXECUTOR_DEFAULT_JAVA_OPTIONS] == "-Djava.io.tmpdir=/tmp/arfl-spark-abc"
    assert conf["spark.executor.extraJavaOptions"] == "-Dx=1"  # the spec's, after it
    # a cluster's executors run on other hosts, where the directory is not
    assert EXECUTOR_DEFAULT_JAVA_OPTIONS not in _conf({"master": "spark://h:7077"})
    monkeypatch.delenv(SCRATCH_ENV)
    assert EXECUTOR_DEFAULT_JAVA_OPTIONS not in _conf({})  # no scratch: the JVM's own


def _driver_config(tmp_path: Path) -> DriverConfig:
    spec = parse_spec({"name": "c", "source": {"topic": "a"}, "sink": {"topic": "b"}}, "c.toml")
    return DriverConfig(
        spec=spec.model_dump(mode="json", by_alias=True), replica=0, bootstrap="127.0.0.1:9",
        output_topic="b.r0", checkpoint_dir=str(tmp_path / "ck"),
        progress_file=str(tmp_path / "p"), app_id_file=str(tmp_path / "a"),
        master=spec.spark.master,
    )  # fmt: skip


def test_a_driver_whose_temp_directory_is_taken_exits_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "arfl-spark-abc"
    taken.symlink_to(tmp_path)  # a name in a shared /tmp someone else made first
    monkeypatch.setenv(SCRATCH_ENV, str(taken))
    cfg = _driver_config(tmp_path)
    assert driver.run(cfg) == driver.EXIT_BAD_CONFIG
    err = capsys.readouterr()
    assert f"{taken} is not a directory of this user's; remove it" in err.out + err.err


def test_a_driver_that_cannot_make_its_temp_directory_may_be_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "gone" / "arfl-spark-abc"))  # no parent
    cfg = _driver_config(tmp_path)
    assert driver.run(cfg) == driver.EXIT_QUERY_FAILED
