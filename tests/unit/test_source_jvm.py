"""The Python half of arfl's JVM reader: the oracle the JVM stream asks for boundaries and read
plans, the ``reader`` option, and the jar's build (what the JVM reads is tested in
tests/integration/test_source_spark.py)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from arfl.errors import DeployError, StackError
from arfl.paths import cache_dir
from arfl.replica.source import BatchOffset, SourceOptions
from arfl.replica.source.offsets import NO_BATCH


class _Next:
    """A policy that ends every batch 5 offsets later on each partition, or stays put."""

    def __init__(self, stay: bool = False) -> None:
        self.stay = stay

    def next_end(self, start: BatchOffset, max_records: int | None) -> BatchOffset:
        del max_records
        if self.stay:
            return start
        return BatchOffset(start.batch + 1, {p: o + 5 for p, o in start.offsets.items()})

    def close(self) -> None:
        pass


def _oracle(stay: bool = False, **kw: object) -> object:
    from arfl.replica.source.datasource import JvmOracle

    oracle = JvmOracle(SourceOptions(bootstrap="b:1", topic="t", reader="jvm", **kw))  # type: ignore[arg-type]
    oracle.reader._planner = (object(), _Next(stay))  # type: ignore[assignment]
    return oracle


def test_the_oracle_answers_in_json_that_is_equal_for_equal_positions() -> None:
    from arfl.replica.source.datasource import JvmOracle, offset_json

    oracle = _oracle(stay=True)
    assert isinstance(oracle, JvmOracle)
    start = BatchOffset(3, {10: 1, 1: 7, 0: 2})
    # Spark ends "no new data" when the end's JSON equals the start's, and the text is what
    # PySpark writes for the Python reader (json.dumps of the canonical dict): a checkpoint
    # reads back the same under either reader.
    text = json.dumps(start.to_dict())
    assert text.index('"1"') < text.index('"10"')  # partitions in numeric order
    assert oracle.latestOffset(text) == text == offset_json(start.to_dict())
    shuffled = json.dumps(dict(reversed(list(start.to_dict().items()))))
    assert oracle.latestOffset(shuffled) == text
    moving = _oracle()
    assert isinstance(moving, JvmOracle)
    end = BatchOffset.from_json(moving.latestOffset(text))
    assert end == BatchOffset(4, {0: 7, 1: 12, 10: 6})


def test_the_oracle_plans_the_same_ranges_as_the_python_reader() -> None:
    from arfl.replica.source.datasource import JvmOracle, RangePartition

    oracle = _oracle(read_tasks=1)
    assert isinstance(oracle, JvmOracle)
    start = BatchOffset(NO_BATCH, {0: 0, 1: 4, 2: 9}).to_dict()
    end = BatchOffset(1, {0: 5, 1: 4, 2: 12}).to_dict()
    plan = json.loads(oracle.partitions(json.dumps(start), json.dumps(end)))
    assert plan == [[[0, 0, 5, []], [2, 9, 12, []]]]  # one task; partition 1 has nothing
    (task,) = oracle.reader.partitions(start, end)
    assert isinstance(task, RangePartition)
    assert [[r.partition, r.start, r.end] for r in task.ranges] == [row[:3] for row in plan[0]]


def test_the_reader_option_is_python_or_jvm() -> None:
    assert SourceOptions.parse({"bootstrap": "b:1", "topic": "t"}).reader == "python"
    assert SourceOptions.parse({"bootstrap": "b:1", "topic": "t", "reader": "jvm"}).reader == "jvm"
    with pytest.raises(DeployError, match="reader='scala': expected python or jvm"):
        SourceOptions.parse({"bootstrap": "b:1", "topic": "t", "reader": "scala"})


def test_the_spec_passes_its_reader_to_the_source() -> None:
    from arfl.configs.spec import Spec
    from arfl.replica.modes.base import ReplicaContext, arfl_source_options

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
    d = json.loads((fixtures / "real-active-leaderless" / "spec.json").read_text())
    for reader in ("jvm", "python"):
        d["replication"]["reader"] = reader
        spec = Spec.model_validate(d)
        ctx = ReplicaContext(
            replica=0, bootstrap="b:1", output_topic="o", checkpoint_dir=Path("/c")
        )
        assert arfl_source_options(spec, ctx, "active-leaderless").reader == reader


def _install_with_javac() -> Any:
    """``arfl.stack.install``, or skip where there is no javac."""
    from arfl.stack import install

    try:
        install.javac()
    except StackError:
        pytest.skip("no javac here")
    return install


def test_the_jar_is_compiled_once_per_source_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install = _install_with_javac()
    jars = sorted(cache_dir().glob("spark-kafka-*/libs/kafka-clients-*.jar"))
    if not jars:
        pytest.skip("the Kafka client is not in the cache (make jars)")
    jar = install.ensure_source_jar(jars[:1], tmp_path)
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    assert {"arfl/source/ArflKafkaProvider.class", "arfl/source/RangeReader.class"} <= names
    mtime = jar.stat().st_mtime_ns
    assert install.ensure_source_jar(jars[:1], tmp_path) == jar
    assert jar.stat().st_mtime_ns == mtime  # not rebuilt
    # Another source text is another jar (an upgrade never runs a stale reader).
    real = install._jvm_sources()
    more = [*real, ("Extra.java", b"package arfl.source; final class Extra {}")]
    monkeypatch.setattr(install, "_jvm_sources", lambda: more)
    other = install.ensure_source_jar(jars[:1], tmp_path)
    assert other != jar and other.parent.parent == jar.parent.parent
    with zipfile.ZipFile(other) as z:
        assert "arfl/source/Extra.class" in z.namelist()


TEXTS = [
    b"plain",
    "caf\u00e9 \u2603 \U0001f600".encode(),
    b"\xff\xfeab",
    b"a\xed\xa0\x80b",  # an encoded surrogate: three replacements in Python, one in Java's decoder
    b"\xf0\x9f\x98",  # a truncated 4-byte sequence: one
    b"x\xc3",
    b"\xc0\xaf\xe0\x80\xaf\xf4\x90\x80\x80\xf8",
    b"\xe2\x28\xa1",
]


def test_the_jvm_reader_decodes_text_as_the_python_reader_does(tmp_path: Path) -> None:
    """Invalid UTF-8 in a key or value becomes U+FFFD in both readers (``RangeReader.text``
    run in a JVM against ``bytes.decode("utf-8", errors="replace")``)."""
    import subprocess

    from arfl.stack import install

    try:
        javac = install.javac()
    except StackError:
        pytest.skip("no javac here")
    jars = sorted(cache_dir().glob("spark-kafka-*/libs/*.jar"))
    if not jars:
        pytest.skip("the connector is not in the cache (make jars)")
    jar = install.ensure_source_jar(jars, tmp_path / "cache")
    probe = tmp_path / "src" / "arfl" / "source" / "Probe.java"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "package arfl.source;\n"
        "public final class Probe { public static void main(String[] a) {\n"
        "  for (String h : a) { byte[] b = java.util.HexFormat.of().parseHex(h);\n"
        "    System.out.println(java.util.HexFormat.of().formatHex(\n"
        "      RangeReader.text(b).getBytes())); } } }\n"
    )
    cp = ":".join([str(jar), str(install.pyspark_jars() / "*"), *map(str, jars)])
    subprocess.run([javac, "-d", str(tmp_path / "out"), "-cp", cp, str(probe)], check=True)
    java = install.java()
    out = subprocess.run(
        [java, "-cp", f"{tmp_path / 'out'}:{cp}", "arfl.source.Probe", *(t.hex() for t in TEXTS)],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout.split()  # fmt: skip
    got = [bytes.fromhex(h).decode("utf-8") for h in out]
    assert got == [t.decode("utf-8", errors="replace") for t in TEXTS]


def test_a_failed_compilation_names_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install = _install_with_javac()
    monkeypatch.setattr(install, "_jvm_sources", lambda: [("Bad.java", b"class Bad { int x = ; }")])
    with pytest.raises(StackError, match="compiling arfl's JVM source reader failed"):
        install.ensure_source_jar([], tmp_path)
