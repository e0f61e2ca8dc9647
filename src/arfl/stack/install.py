"""``arfl stack install``: Apache Kafka's jars and Spark's Kafka connector, fetched once.

Layout under the cache directory (:func:`arfl.paths.cache_dir`)::

    kafka-4.1.1/libs/*.jar            a KRaft broker's classpath (mvn, or Apache's release archive)
    kafka-4.1.1/installed.json        marker: written last, so a half-done install is redone
    spark-kafka-<pyspark>/libs/*.jar  spark-sql-kafka-0-10 + runtime deps not in pyspark/jars
    spark-kafka-<pyspark>/installed.json

ZooKeeper needs no download: pyspark ships its jars.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from arfl.errors import StackError
from arfl.paths import cache_dir

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
KAFKA_ARCHIVE = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.tgz"
KAFKA_ARCHIVE_URLS = (
    f"https://downloads.apache.org/kafka/{KAFKA_VERSION}/{KAFKA_ARCHIVE}",
    f"https://archive.apache.org/dist/kafka/{KAFKA_VERSION}/{KAFKA_ARCHIVE}",
)
MARKER = "installed.json"
MVN_TIMEOUT_S = 900.0

# A fetch function: (url, destination file) -> None; replaced in tests so none touches the network.
Fetch = Callable[[str, Path], None]


@dataclass(frozen=True)
class Installed:
    """What :func:`ensure_installed` put into the cache.

    Attributes:
        kafka_jars: directory whose ``*.jar`` files are a Kafka broker's classpath.
        spark_kafka_jars: jars to add to ``spark.jars``: Spark's built-in Kafka source/sink and
            arfl's JVM source reader (:func:`ensure_source_jar`).
        spark_kafka_version: the spark-sql-kafka-0-10 version fetched; equals pyspark's version
            unless Maven Central has no connector for it (then the closest older release).
    """

    kafka_jars: Path
    spark_kafka_jars: list[Path]
    spark_kafka_version: str = ""


def _jdk_tool(name: str, why: str) -> str:
    """The JDK's ``name`` (``$JAVA_HOME/bin/<name>`` first, then PATH).

    Raises:
        StackError: there is none (``why`` says what needs it).
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / name, os.X_OK):
        return str(Path(home) / "bin" / name)
    found = shutil.which(name)
    if not found:
        raise StackError(
            f"no '{name}' on PATH ({why}); install a JDK "
            "(e.g. apt-get install openjdk-17-jdk-headless) or set JAVA_HOME"
        )
    return found


def java() -> str:
    """Return the ``java`` executable (``$JAVA_HOME/bin/java`` first, then PATH).

    Raises:
        StackError: if there is none.
    """
    return _jdk_tool("java", "Java 17+ runs ZooKeeper and Kafka")


def pyspark_version() -> str:
    """The installed pyspark's version (``pyspark.__version__``) without importing it."""
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError as e:
        raise StackError("pyspark is not installed; run 'make install'") from e


def pyspark_jars() -> Path:
    """The ``jars`` directory of the installed pyspark (ZooKeeper, Scala, slf4j, ...)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise StackError("pyspark is not installed; run 'make install'")
    jars = Path(spec.origin).parent / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise StackError(f"no zookeeper jar in {jars}; reinstall pyspark ('make install')")
    return jars


def resource(name: str) -> str:
    """Text of a file shipped in ``arfl/stack/resources``."""
    return (importlib.resources.files("arfl.stack") / "resources" / name).read_text("utf-8")


def _marker_ok(root: Path) -> dict[str, object] | None:
    try:
        data = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    libs = root / "libs"
    if not isinstance(data, dict) or not libs.is_dir():
        return None
    jars = data.get("jars")
    if not isinstance(jars, list) or not all((libs / str(j)).is_file() for j in jars):
        return None
    return data


def _write_marker(root: Path, data: dict[str, object]) -> None:
    tmp = root / (MARKER + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(root / MARKER)


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _replace_dir(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    src.replace(dst)


class _MvnFailed(StackError):
    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


def _mvn_copy(mvn: str, pom_text: str, work: Path, what: str) -> Path:
    """Run ``mvn dependency:copy-dependencies`` on ``pom_text``; return the repository-layout dir.

    Raises:
        StackError: with the tail of Maven's output if it fails.
    """
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(pom_text)
    out = work / "repo"
    cmd = [
        mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(work / "pom.xml"),
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        "-Dmdep.useRepositoryLayout=true", f"-DoutputDirectory={out}",
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd, cwd=work, capture_output=True, text=True, timeout=MVN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise StackError(
            f"mvn did not fetch {what} within {MVN_TIMEOUT_S:.0f}s; check access to Maven Central"
        ) from e
    if proc.returncode != 0:
        raise _MvnFailed(
            f"mvn dependency:copy-dependencies failed (exit {proc.returncode}) fetching {what}:\n"
            f"{_tail(proc.stdout + proc.stderr)}\n"
            "check access to Maven Central (proxy settings in ~/.m2/settings.xml) and retry "
            "'arfl stack install'",
            proc.stdout + proc.stderr,
        )
    return out


@dataclass(frozen=True)
class _Artifact:
    artifact_id: str
    version: str
    path: Path


def _artifacts(repo: Path) -> list[_Artifact]:
    """Jars in a Maven repository layout (``group/dirs/artifact/version/file.jar``)."""
    return sorted(
        (_Artifact(p.parent.parent.name, p.parent.name, p) for p in repo.rglob("*.jar")),
        key=lambda a: a.path.name,
    )


_VERSION_START = re.compile(r"-\d")


def shipped_by(artifact_id: str, jar_names: list[str]) -> str | None:
    """Return the jar among ``jar_names`` that is (some version of) ``artifact_id``, if any.

    A jar file is ``<artifactId>-<version>.jar`` with the version starting with a digit;
    comparing by artifact id (not file name) catches other versions of the same library, which
    would otherwise sit twice on Spark's classpath.
    """
    prefix = artifact_id + "-"
    for name in jar_names:
        if name.startswith(prefix) and _VERSION_START.match(name, len(artifact_id)):
            return name
    return None


def _fetch_url(url: str, dest: Path) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": "arfl"})
    with urllib.request.urlopen(req, timeout=60) as resp, dest.open("wb") as f:
        shutil.copyfileobj(resp, f, length=1 << 20)


def parse_sha512(text: str, filename: str) -> str:
    """Extract the SHA-512 hex digest from an Apache ``.sha512`` file.

    Accepts both ``gpg --print-md`` output (``name: ABCD 1234 ...`` over several lines, as
    Kafka's releases use) and ``sha512sum`` output (``abcd1234...  name``).

    Raises:
        StackError: if no 128-hex-digit digest is found.
    """
    body = text.replace(filename, "").strip()
    if ":" in body:  # gpg style: "<name>: <groups>"
        body = body.split(":", 1)[1]
    hexes = "".join(re.findall(r"[0-9A-Fa-f]+", body))
    m = re.search(r"[0-9A-Fa-f]{128}", hexes)
    if not m or len(hexes) != 128:
        raise StackError(f"cannot read a SHA-512 digest for {filename} from {text[:200]!r}")
    return m.group(0).lower()


def sha512_of(path: Path) -> str:
    """Hex SHA-512 of a file."""
    h = hashlib.sha512()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_sha512(path: Path, expected: str) -> None:
    """Raise a StackError if ``path``'s SHA-512 is not ``expected``."""
    got = sha512_of(path)
    if got != expected.lower():
        raise StackError(
            f"SHA-512 of {path} is {got[:16]}..., expected {expected[:16]}...; the download is "
            "corrupt or tampered with: delete it and retry 'arfl stack install'"
        )


def _install_kafka_from_archive(root: Path, fetch: Fetch) -> list[str]:
    """Download Apache's Kafka release archive, verify it, unpack ``libs/`` into ``root``."""
    errors: list[str] = []
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=".kafka-dl-") as tmp_s:
        tmp = Path(tmp_s)
        archive = tmp / KAFKA_ARCHIVE
        for url in KAFKA_ARCHIVE_URLS:
            try:
                fetch(url + ".sha512", tmp / "sha512")
                expected = parse_sha512((tmp / "sha512").read_text(), KAFKA_ARCHIVE)
                fetch(url, archive)
            except (OSError, urllib.error.URLError, StackError) as e:
                errors.append(f"{url}: {e}")
                continue
            verify_sha512(archive, expected)
            break
        else:
            raise StackError(
                "no 'mvn' on PATH and downloading the Kafka release failed ("
                + "; ".join(errors)
                + "); install Maven (e.g. apt-get install maven) and retry 'arfl stack install'"
            )
        staging = tmp / "libs"
        staging.mkdir()
        top = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}/libs/"
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                name = member.name
                if not (name.startswith(top) and name.endswith(".jar") and member.isfile()):
                    continue
                src = tar.extractfile(member)
                if src is None:
                    continue
                with src, (staging / Path(name).name).open("wb") as f:
                    shutil.copyfileobj(src, f)
        jars = sorted(p.name for p in staging.glob("*.jar"))
        if not any(j.startswith(f"kafka_{SCALA_VERSION}-") for j in jars):
            raise StackError(f"{KAFKA_ARCHIVE} has no kafka_{SCALA_VERSION} jar in {top}")
        _replace_dir(staging, root / "libs")
    return jars


def ensure_kafka(cache: Path | None = None, *, fetch: Fetch | None = None) -> Path:
    """Make sure Kafka's jars are in the cache; return the ``libs`` directory.

    Uses ``mvn`` when on PATH, else Apache's release archive (SHA-512 verified).

    Args:
        cache: cache directory; :func:`arfl.paths.cache_dir` when None.
        fetch: download function (url, dest); for tests.

    Raises:
        StackError: no java, Maven failed, or no mvn and the download failed.
    """
    root = (cache or cache_dir()) / f"kafka-{KAFKA_VERSION}"
    if _marker_ok(root) is not None:
        return root / "libs"
    java()
    root.mkdir(parents=True, exist_ok=True)
    mvn = shutil.which("mvn")
    if mvn:
        with tempfile.TemporaryDirectory(dir=root.parent, prefix=".kafka-mvn-") as tmp_s:
            pom = resource("kafka-pom.xml").replace("@KAFKA_VERSION@", KAFKA_VERSION)
            repo = _mvn_copy(mvn, pom, Path(tmp_s), f"Kafka {KAFKA_VERSION}")
            staging = Path(tmp_s) / "libs"
            staging.mkdir()
            for a in _artifacts(repo):
                a.path.replace(staging / a.path.name)
            jars = sorted(p.name for p in staging.glob("*.jar"))
            _replace_dir(staging, root / "libs")
        method = "mvn"
    else:
        jars = _install_kafka_from_archive(root, fetch or _fetch_url)
        method = "archive"
    _write_marker(root, {"kafka": KAFKA_VERSION, "method": method, "jars": jars})
    return root / "libs"


def _connector_missing(mvn_output: str, version: str) -> bool:
    """Whether Maven failed because the connector itself is not published at ``version``."""
    coords = f"org.apache.spark:spark-sql-kafka-0-10_2.13:jar:{version}"
    return (f"Could not find artifact {coords}" in mvn_output) or (
        f"{coords} was not found" in mvn_output
    )


def _connector_candidates(version: str) -> list[str]:
    """Connector versions to try: pyspark's own, then that minor's .0, then the previous minor's.

    Maven Central can lag behind PyPI (or a mirror may be partial): pyspark 4.3.0 was on PyPI
    while spark-sql-kafka-0-10 4.3.0 was not. Version ranges do not help, because Maven then
    resolves the dependencies of every version in the range, previews included.
    """
    out = [version]
    m = re.match(r"(\d+)\.(\d+)\.(\d+)$", version)
    if m:
        major, minor, patch = (int(g) for g in m.groups())
        if patch > 0:
            out.append(f"{major}.{minor}.0")
        if minor > 0:
            out.append(f"{major}.{minor - 1}.0")
    return out


def ensure_spark_kafka(cache: Path | None = None) -> tuple[list[Path], str]:
    """Make sure spark-sql-kafka-0-10 and its runtime deps (minus pyspark's) are in the cache.

    Returns:
        The jar paths for ``spark.jars`` and the connector version fetched.

    Raises:
        StackError: no java, no mvn, or Maven failed for every candidate version.
    """
    pyver = pyspark_version()
    root = (cache or cache_dir()) / f"spark-kafka-{pyver}"
    marker = _marker_ok(root)
    if marker is not None:
        names = marker["jars"]
        assert isinstance(names, list)  # _marker_ok checked it
        return [root / "libs" / str(j) for j in names], str(marker.get("connector", pyver))
    java()
    mvn = shutil.which("mvn")
    if not mvn:
        raise StackError(
            "no 'mvn' on PATH: Spark's Kafka connector (spark-sql-kafka-0-10) and its "
            "dependencies are resolved with Maven; install it (e.g. apt-get install maven) and "
            "retry 'arfl stack install'"
        )
    shipped = sorted(p.name for p in pyspark_jars().glob("*.jar"))
    root.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=".spark-kafka-mvn-") as tmp_s:
        tmp = Path(tmp_s)
        for i, version in enumerate(_connector_candidates(pyver)):
            pom = resource("spark-kafka-pom.xml").replace("@SPARK_VERSION@", version)
            try:
                repo = _mvn_copy(mvn, pom, tmp / f"try-{i}", f"spark-sql-kafka-0-10 {version}")
            except _MvnFailed as e:
                if not _connector_missing(e.output, version):
                    raise
                failures.append(version)
                continue
            break
        else:
            raise StackError(
                "Maven Central has no spark-sql-kafka-0-10_2.13 for pyspark "
                f"{pyver} (tried {', '.join(failures)}); install a pyspark whose connector is "
                "published, or put the jars into " + str(root / "libs") + " by hand"
            )
        staging = tmp / "libs"
        staging.mkdir()
        jars: list[str] = []
        skipped: list[str] = []
        for a in _artifacts(repo):
            dup = shipped_by(a.artifact_id, shipped)
            if dup is not None:
                skipped.append(f"{a.path.name} (pyspark has {dup})")
                continue
            a.path.replace(staging / a.path.name)
            jars.append(a.path.name)
        _replace_dir(staging, root / "libs")
    _write_marker(
        root,
        {"pyspark": pyver, "connector": version, "jars": jars, "skipped_as_in_pyspark": skipped},
    )
    return [root / "libs" / j for j in jars], version


SOURCE_JAR = "arfl-source.jar"
SOURCE_PACKAGE = "arfl.source"
"""The JVM half of arfl's agreed-batch source (``resources/jvm``): compiled here by ``javac``
against pyspark's jars and the Kafka client, once per source text and pyspark version."""


def javac() -> str:
    """The ``javac`` executable (``$JAVA_HOME/bin/javac`` first, then PATH).

    Raises:
        StackError: there is none (a JRE without a JDK).
    """
    return _jdk_tool("javac", "arfl compiles its JVM source reader once")


def _jvm_sources() -> list[tuple[str, bytes]]:
    pkg = importlib.resources.files("arfl.stack").joinpath(
        "resources", "jvm", *SOURCE_PACKAGE.split(".")
    )
    return [
        (f.name, f.read_bytes())
        for f in sorted(pkg.iterdir(), key=lambda t: t.name)
        if f.name.endswith(".java")
    ]


def ensure_source_jar(spark_kafka_jars: list[Path], cache: Path | None = None) -> Path:
    """Compile arfl's JVM source reader (``resources/jvm``) into the cache, once.

    Args:
        spark_kafka_jars: the connector's jars (the Kafka client is among them).
        cache: cache directory (default :func:`arfl.paths.cache_dir`).

    Returns:
        The jar, for ``spark.jars``.

    Raises:
        StackError: no javac, or the compilation failed (its output is in the message).
    """
    import zipfile

    sources = _jvm_sources()
    digest = hashlib.sha256(pyspark_version().encode())
    for name, text in sources:
        digest.update(name.encode() + b"\0" + text)
    root = (cache or cache_dir()) / f"arfl-source-{digest.hexdigest()[:12]}"
    jar = root / SOURCE_JAR
    if jar.is_file():
        return jar
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp_s:
        tmp = Path(tmp_s)
        src = tmp / "src"
        src.mkdir()
        for name, text in sources:
            (src / name).write_bytes(text)
        classes = tmp / "classes"
        cp = os.pathsep.join([str(pyspark_jars() / "*"), *(str(j) for j in spark_kafka_jars)])
        cmd = [javac(), "--release", "17", "-nowarn", "-d", str(classes), "-cp", cp]
        done = subprocess.run(
            cmd + [str(src / n) for n, _ in sources],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise StackError(f"compiling arfl's JVM source reader failed:\n{done.stderr[-3000:]}")
        staged = tmp / SOURCE_JAR
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(classes.rglob("*.class")):
                z.write(f, f.relative_to(classes).as_posix())
        staged.replace(jar)
    return jar


def ensure_installed(cache: Path | None = None) -> Installed:
    """Fetch Kafka's jars and Spark's Kafka connector into the cache, once.

    Idempotent: a marker file per part is written last, so a finished install returns at once
    and an interrupted one is redone.

    Args:
        cache: cache directory; :func:`arfl.paths.cache_dir` (``ARFL_CACHE_DIR``) when None.

    Raises:
        StackError: no java; Maven failed; no mvn and the Kafka download failed.
    """
    kafka = ensure_kafka(cache)
    spark_jars, version = ensure_spark_kafka(cache)
    source = ensure_source_jar(spark_jars, cache)
    return Installed(
        kafka_jars=kafka, spark_kafka_jars=[*spark_jars, source], spark_kafka_version=version
    )


def kafka_installed(cache: Path | None = None) -> bool:
    """Whether Kafka's jars are already in the cache (no download needed)."""
    return _marker_ok((cache or cache_dir()) / f"kafka-{KAFKA_VERSION}") is not None
