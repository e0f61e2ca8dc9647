"""Jar installation: checksum handling, the archive fallback (fake downloads), idempotence."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from arfl.errors import StackError
from arfl.stack import install

TOP = f"kafka_{install.SCALA_VERSION}-{install.KAFKA_VERSION}"


def _gpg_style(digest: str, name: str) -> str:
    # Kafka's .sha512 files come from `gpg --print-md SHA512`: upper case, grouped, wrapped.
    up = digest.upper()
    groups = [up[i : i + 8] for i in range(0, 128, 8)]
    return f"{name}: " + " ".join(groups[:6]) + "\n" + " ".join(groups[6:]) + "\n"


def test_parse_sha512_gpg_and_sha512sum_formats() -> None:
    digest = hashlib.sha512(b"x").hexdigest()
    assert install.parse_sha512(_gpg_style(digest, "k.tgz"), "k.tgz") == digest
    assert install.parse_sha512(f"{digest}  k.tgz\n", "k.tgz") == digest
    assert install.parse_sha512(digest.upper(), "k.tgz") == digest
    with pytest.raises(StackError, match="cannot read a SHA-512"):
        install.parse_sha512("<html>not found</html>", "k.tgz")
    with pytest.raises(StackError, match="cannot read a SHA-512"):
        install.parse_sha512("k.tgz: ABCD", "k.tgz")


def test_verify_sha512(tmp_path: Path) -> None:
    f = tmp_path / "a"
    f.write_bytes(b"payload")
    install.verify_sha512(f, hashlib.sha512(b"payload").hexdigest().upper())
    with pytest.raises(StackError, match="corrupt or tampered"):
        install.verify_sha512(f, hashlib.sha512(b"other").hexdigest())


def _archive(jars: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in {
            **{f"{TOP}/libs/{j}": d for j, d in jars.items()},
            f"{TOP}/bin/kafka-server-start.sh": b"#!/bin/sh\n",
            f"{TOP}/config/server.properties": b"x=1\n",
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class FakeDownloads:
    """Serves archive and checksum from memory; records which URLs were asked for."""

    def __init__(self, archive: bytes, sha: str | None = None, fail: bool = False) -> None:
        self.archive = archive
        self.sha = sha if sha is not None else hashlib.sha512(archive).hexdigest()
        self.fail = fail
        self.urls: list[str] = []

    def __call__(self, url: str, dest: Path) -> None:
        self.urls.append(url)
        if self.fail:
            raise OSError("Temporary failure in name resolution")
        if url.endswith(".sha512"):
            dest.write_text(_gpg_style(self.sha, install.KAFKA_ARCHIVE))
        else:
            dest.write_bytes(self.archive)


@pytest.fixture
def no_mvn(monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "mvn" else real(name))
    monkeypatch.setattr(install, "java", lambda: "/usr/bin/java")


@pytest.mark.usefixtures("no_mvn")
def test_without_mvn_the_verified_archive_is_unpacked_once(tmp_path: Path) -> None:
    fake = FakeDownloads(_archive({"kafka_2.13-4.1.1.jar": b"k", "kafka-clients-4.1.1.jar": b"c"}))
    libs = install.ensure_kafka(tmp_path, fetch=fake)
    assert libs == tmp_path / f"kafka-{install.KAFKA_VERSION}" / "libs"
    assert sorted(p.name for p in libs.iterdir()) == [
        "kafka-clients-4.1.1.jar",
        "kafka_2.13-4.1.1.jar",
    ]
    assert fake.urls == [
        install.KAFKA_ARCHIVE_URLS[0] + ".sha512",
        install.KAFKA_ARCHIVE_URLS[0],
    ]
    marker = json.loads((libs.parent / install.MARKER).read_text())
    assert marker["method"] == "archive"
    assert install.kafka_installed(tmp_path)
    # Second call: the marker says done; nothing is downloaded.
    again = FakeDownloads(b"", fail=True)
    assert install.ensure_kafka(tmp_path, fetch=again) == libs
    assert again.urls == []


@pytest.mark.usefixtures("no_mvn")
def test_archive_with_wrong_checksum_is_rejected(tmp_path: Path) -> None:
    fake = FakeDownloads(_archive({"kafka_2.13-4.1.1.jar": b"k"}), sha="0" * 128)
    with pytest.raises(StackError, match="corrupt or tampered"):
        install.ensure_kafka(tmp_path, fetch=fake)
    assert not install.kafka_installed(tmp_path)
    assert not (tmp_path / f"kafka-{install.KAFKA_VERSION}" / "libs").exists()


@pytest.mark.usefixtures("no_mvn")
def test_failed_download_without_mvn_says_what_to_do(tmp_path: Path) -> None:
    fake = FakeDownloads(b"", fail=True)
    with pytest.raises(StackError) as e:
        install.ensure_kafka(tmp_path, fetch=fake)
    msg = str(e.value)
    assert "no 'mvn' on PATH" in msg and "install Maven" in msg
    assert "Temporary failure in name resolution" in msg
    assert len(fake.urls) == len(install.KAFKA_ARCHIVE_URLS)  # every mirror was tried


@pytest.mark.usefixtures("no_mvn")
def test_interrupted_install_is_redone(tmp_path: Path) -> None:
    fake = FakeDownloads(_archive({"kafka_2.13-4.1.1.jar": b"k"}))
    libs = install.ensure_kafka(tmp_path, fetch=fake)
    (libs / "kafka_2.13-4.1.1.jar").unlink()  # a jar the marker lists is gone
    assert not install.kafka_installed(tmp_path)
    install.ensure_kafka(tmp_path, fetch=fake)
    assert (libs / "kafka_2.13-4.1.1.jar").read_bytes() == b"k"


def test_spark_kafka_without_mvn_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(install, "java", lambda: "/usr/bin/java")
    with pytest.raises(StackError, match=r"no 'mvn' on PATH.*apt-get install maven"):
        install.ensure_spark_kafka(tmp_path)


def test_no_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(StackError, match=r"no 'java' on PATH.*JAVA_HOME"):
        install.java()


def test_java_home_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "bin" / "java"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert install.java() == str(exe)


@pytest.mark.parametrize(
    ("artifact", "shipped", "expected"),
    [
        ("scala-library", ["scala-library-2.13.18.jar"], "scala-library-2.13.18.jar"),
        ("slf4j-api", ["slf4j-api-2.0.17.jar"], "slf4j-api-2.0.17.jar"),
        ("log4j-1.2-api", ["log4j-1.2-api-2.25.4.jar"], "log4j-1.2-api-2.25.4.jar"),
        ("zstd-jni", ["zstd-jni-1.5.7-7.jar"], "zstd-jni-1.5.7-7.jar"),
        ("kafka", ["kafka-clients-3.9.2.jar"], None),  # a prefix of another artifact
        ("kafka-clients", ["kafka-clients-3.9.2.jar"], "kafka-clients-3.9.2.jar"),
        ("commons-pool2", ["commons-pool-1.5.4.jar"], None),
        ("spark-tags_2.13", ["spark-tags_2.13-4.3.0.jar"], "spark-tags_2.13-4.3.0.jar"),
    ],
)
def test_shipped_by_compares_artifact_names(
    artifact: str, shipped: list[str], expected: str | None
) -> None:
    assert install.shipped_by(artifact, shipped) == expected


def test_connector_candidates() -> None:
    assert install._connector_candidates("4.3.0") == ["4.3.0", "4.2.0"]
    assert install._connector_candidates("4.1.2") == ["4.1.2", "4.1.0", "4.0.0"]
    assert install._connector_candidates("4.0.0") == ["4.0.0"]
    assert install._connector_candidates("4.3.0.dev1") == ["4.3.0.dev1"]


def test_connector_missing_recognises_both_maven_messages() -> None:
    coords = "org.apache.spark:spark-sql-kafka-0-10_2.13:jar:4.3.0"
    assert install._connector_missing(f"Could not find artifact {coords} in central", "4.3.0")
    assert install._connector_missing(f"{coords} was not found in https://x during", "4.3.0")
    assert not install._connector_missing("Could not transfer artifact ... Unknown host", "4.3.0")


def test_shipped_poms_are_parameterised() -> None:
    assert "@KAFKA_VERSION@" in install.resource("kafka-pom.xml")
    assert "<artifactId>slf4j-api</artifactId>" in install.resource("kafka-pom.xml")
    assert "@SPARK_VERSION@" in install.resource("spark-kafka-pom.xml")
    assert "<Configuration" in install.resource("log4j2.xml")
