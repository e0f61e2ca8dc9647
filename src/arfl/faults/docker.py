"""The docker target's mechanisms, all through the docker SDK: the runtime image, a run's
network, its replica containers, and what faults and ``recover`` need of them.

Everything arfl creates carries labels (``arfl.run=<run>``, ``arfl.replica=<N>``,
``arfl.kind=replica|network|runtime``) and is found again by label, never by name alone.

Layout of run ``R`` (network number ``k``)::

    host:  arfl-d<k>  10.214.<k>.1/24   docker bridge network "arfl-<R>" (labelled);
                                        the run's own ZooKeeper and Kafka listen here
    container arfl-<R>-r<N>:  10.214.<k>.<N+2>, the replica's driver, its local-cluster
                              worker and executor JVMs (real JVMs, inside the container)

The runtime image has no files of its own: ``docker import`` of an almost empty root
(mount points only), labelled, tagged by the hash of its recipe. Containers bind-mount the
host's system directories and the paths the driver needs (interpreter, virtualenv, source,
Spark home, jars) read-only at the same paths, and the run directory read-write, so the same
driver command line runs inside. Users whose image has Java, Python and arfl set
``[docker] image``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import ipaddress
import os
import tarfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arfl.errors import FaultError

LABEL_RUN = "arfl.run"
LABEL_REPLICA = "arfl.replica"
LABEL_KIND = "arfl.kind"
SUBNET_BASE = "10.214"  # 10.214.<k>.0/24; checked against this host's addresses and networks
RUNTIME_REPO = "arfl-runtime"
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/bin", "/lib", "/lib32", "/lib64")
"""Mounted read-only when they are directories; the ones that are symlinks here (a merged
``/usr``: ``/bin -> usr/bin``) are the same symlinks in the image instead."""
_RUNTIME_DIRS = ("tmp", "proc", "sys", "dev", "root", "run", "var", "var/tmp", "sbin")
"""Plain directories of the image. ``/sbin`` stays one (not the host's): docker mounts its
init (``/sbin/docker-init``) there, which a read-only bind of the host's would refuse."""
_RECIPE_VERSION = "2"
EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"


def client() -> Any:
    """A docker client for the daemon ``DOCKER_HOST`` names (default: the local socket).

    Raises:
        FaultError: no daemon answers (the message says where it looked and what to do).
    """
    import docker

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        c = docker.from_env(timeout=60)
        c.ping()
    except Exception as e:
        raise FaultError(
            f"docker target: no docker daemon answers at {where} ({type(e).__name__}); start "
            "one (as root: apt-get install docker.io && dockerd &) or set DOCKER_HOST"
        ) from None
    return c


def available() -> bool:
    """True when a docker daemon answers (for ``recover`` and listings: never raises)."""
    try:
        client()
    except FaultError:
        return False
    return True


# --- the runtime image ------------------------------------------------------------------


@dataclass(frozen=True)
class ImageInfo:
    """The image replicas run in, and what building it took (``built`` False: cached/given)."""

    tag: str
    built: bool
    build_s: float
    size_bytes: int


def _host_symlinks() -> dict[str, str]:
    """Top-level system directories that are symlinks on this host: name -> target."""
    return {
        d.lstrip("/"): os.readlink(d)
        for d in (*SYSTEM_DIRS, "/sbin")
        if os.path.islink(d) and d != "/sbin"
    }


def _runtime_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in _RUNTIME_DIRS:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d.endswith("tmp") else 0o755
            tar.addfile(info)
        for name, target in sorted(_host_symlinks().items()):
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


def runtime_tag() -> str:
    """The local runtime image's tag: the hash of its recipe (content-addressed cache)."""
    digest = hashlib.sha256(_runtime_tar() + _RECIPE_VERSION.encode()).hexdigest()[:12]
    return f"{RUNTIME_REPO}:{digest}"


def ensure_image(image: str | None = None) -> ImageInfo:
    """The image to run replicas in: ``image`` when given (it must exist locally: nothing is
    pulled), else the runtime image, built with ``docker import`` when not cached.

    Raises:
        FaultError: no daemon, or ``image`` is not present locally.
    """
    import docker.errors

    c = client()
    tag = image or runtime_tag()
    try:
        found = c.images.get(tag)
        return ImageInfo(tag, built=False, build_s=0.0, size_bytes=int(found.attrs.get("Size", 0)))
    except docker.errors.ImageNotFound:
        if image:
            raise FaultError(
                f"docker.image = {image!r} is not present on the docker host and arfl pulls "
                "nothing; build it first (see the Dockerfile in the repository) or leave "
                "docker.image unset to use arfl's local runtime image"
            ) from None
    t0 = time.monotonic()
    repo, version = tag.split(":")
    c.api.import_image_from_data(
        _runtime_tar(),
        repository=repo,
        tag=version,
        changes=[f"LABEL {LABEL_KIND}=runtime"],
    )
    size = int(c.images.get(tag).attrs.get("Size", 0))
    return ImageInfo(tag, built=True, build_s=time.monotonic() - t0, size_bytes=size)


def mounts_for(
    paths: Iterable[str | Path], writable: Iterable[str | Path] = (), *, system: bool = True
) -> list[Any]:
    """Bind mounts for a replica container: the system directories (with ``system``) and
    ``paths`` read-only, ``writable`` read-write, each at its own path; a path under another
    is not mounted twice.
    """
    from docker.types import Mount

    rw = {str(Path(p).resolve()) for p in writable}
    wanted = {str(Path(p).resolve()) for p in paths} | rw
    if system:
        wanted |= {d for d in SYSTEM_DIRS if Path(d).is_dir() and not Path(d).is_symlink()}
    chosen: list[str] = []
    for p in sorted(wanted, key=lambda s: (s.count("/"), s)):
        covered = any(p.startswith(c.rstrip("/") + "/") for c in chosen)
        if Path(p).exists() and (p in rw or not covered):
            chosen.append(p)  # a writable directory inside a read-only one is mounted over it
    return [
        Mount(target=p, source=str(Path(p).resolve()), type="bind", read_only=p not in rw)
        for p in chosen
    ]


# --- networks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DockerNetState:
    """A run's docker network and its replicas' containers (``state.json`` ``docker``)."""

    network: str
    bridge: str
    subnet: str
    gateway: str
    image: str
    containers: dict[int, str] = field(default_factory=dict)
    addresses: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``docker`` object of ``state.json``."""
        return {
            "network": self.network,
            "bridge": self.bridge,
            "subnet": self.subnet,
            "gateway": self.gateway,
            "image": self.image,
            "containers": {str(i): n for i, n in sorted(self.containers.items())},
            "addresses": {str(i): a for i, a in sorted(self.addresses.items())},
        }

    @classmethod
    def from_json(cls, raw: Any) -> DockerNetState | None:
        """Parse the ``docker`` object (None when absent)."""
        if not raw:
            return None
        return cls(
            network=str(raw["network"]),
            bridge=str(raw.get("bridge") or ""),
            subnet=str(raw["subnet"]),
            gateway=str(raw["gateway"]),
            image=str(raw.get("image") or ""),
            containers={int(k): str(v) for k, v in dict(raw.get("containers") or {}).items()},
            addresses={int(k): str(v) for k, v in dict(raw.get("addresses") or {}).items()},
        )


def container_name(run: str, replica: int) -> str:
    """The container of ``replica`` in ``run``."""
    return f"arfl-{run}-r{replica}"


def network_name(run: str) -> str:
    """The docker network of ``run``."""
    return f"arfl-{run}"


def _taken_subnets(c: Any) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    from pyroute2 import IPRoute

    taken: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    with IPRoute() as ipr:
        for a in ipr.get_addr():
            taken.append(
                ipaddress.ip_network(f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}", strict=False)
            )
    for net in c.networks.list():
        for cfg in (net.attrs.get("IPAM") or {}).get("Config") or []:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                taken.append(ipaddress.ip_network(cfg["Subnet"], strict=False))
    return taken


def create_network(run: str, replicas: Sequence[int], image: str) -> DockerNetState:
    """Create the run's bridge network with an explicit free ``10.214.<k>.0/24`` subnet.

    Raises:
        FaultError: no daemon, or no free subnet.
    """
    import docker.types

    c = client()
    taken = _taken_subnets(c)
    for k in range(256):
        subnet = ipaddress.ip_network(f"{SUBNET_BASE}.{k}.0/24")
        if not any(subnet.overlaps(t) for t in taken):
            break
    else:
        raise FaultError(f"docker target: no free subnet {SUBNET_BASE}.<k>.0/24")
    hosts = list(subnet.hosts())
    gateway = str(hosts[0])
    bridge = f"arfl-d{k}"
    ipam = docker.types.IPAMConfig(
        pool_configs=[docker.types.IPAMPool(subnet=str(subnet), gateway=gateway)]
    )
    name = network_name(run)
    c.networks.create(
        name,
        driver="bridge",
        ipam=ipam,
        labels={LABEL_RUN: run, LABEL_KIND: "network"},
        options={"com.docker.network.bridge.name": bridge},
    )
    return DockerNetState(
        network=name,
        bridge=bridge,
        subnet=str(subnet),
        gateway=gateway,
        image=image,
        containers={r: container_name(run, r) for r in replicas},
        addresses={r: str(hosts[1 + r]) for r in replicas},
    )


def remove_run(run: str) -> list[str]:
    """Remove every container (unpaused first, then killed) and network labelled ``run``.

    Returns:
        What was removed, for messages; empty when there was nothing (or no daemon).
    """
    try:
        c = client()
    except FaultError:
        return []
    removed: list[str] = []
    for ctr in c.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run}"}):
        with contextlib.suppress(Exception):
            if ctr.status == "paused":
                ctr.unpause()
        with contextlib.suppress(Exception):
            ctr.remove(force=True)
            removed.append(f"container {ctr.name}")
    for net in c.networks.list(filters={"label": f"{LABEL_RUN}={run}"}):
        with contextlib.suppress(Exception):
            net.reload()
            for ctr in net.containers:
                net.disconnect(ctr, force=True)
        with contextlib.suppress(Exception):
            net.remove()
            removed.append(f"network {net.name}")
    return removed


def run_leftovers(run: str) -> list[str]:
    """Containers and networks labelled ``run`` that still exist (empty without a daemon)."""
    try:
        c = client()
    except FaultError:
        return []
    flt = {"label": f"{LABEL_RUN}={run}"}
    return [f"container {x.name}" for x in c.containers.list(all=True, filters=flt)] + [
        f"network {n.name}" for n in c.networks.list(filters=flt)
    ]


# --- containers ---------------------------------------------------------------------------


def container(name: str) -> Any:
    """The container called ``name``.

    Raises:
        FaultError: no daemon or no such container.
    """
    import docker.errors

    try:
        return client().containers.get(name)
    except docker.errors.NotFound:
        raise FaultError(f"docker target: container {name} does not exist") from None


def status(name: str) -> str:
    """The container's state (``running``, ``paused``, ``exited``; ``gone`` when removed).

    Raises:
        FaultError: no daemon.
    """
    import docker.errors

    try:
        return str(client().containers.get(name).status)
    except docker.errors.NotFound:
        return "gone"


def host_pids(ctr: Any) -> dict[int, str]:
    """Host pid -> command line of every process in a running container (``docker top``)."""
    ctr.reload()
    if ctr.status not in ("running", "paused"):
        return {}
    top = ctr.top(ps_args="-eo pid,args")
    titles = [t.upper() for t in top.get("Titles") or []]
    pid_at = titles.index("PID") if "PID" in titles else 0
    cmd_at = next((i for i, t in enumerate(titles) if t in ("ARGS", "COMMAND", "CMD")), -1)
    out: dict[int, str] = {}
    for row in top.get("Processes") or []:
        with contextlib.suppress(ValueError, IndexError):
            out[int(row[pid_at])] = str(row[cmd_at])
    return out


def executors_in(ctr: Any) -> dict[str, int]:
    """Executor id -> host pid of every executor JVM running in the container."""
    found: dict[str, int] = {}
    for pid, cmd in host_pids(ctr).items():
        if EXECUTOR_MAIN not in cmd:
            continue
        parts = cmd.split()
        with contextlib.suppress(ValueError, IndexError):
            found[parts[parts.index("--executor-id") + 1]] = pid
    return found


def host_veth(ctr: Any) -> str:
    """The host end of the container's ``eth0`` veth (for a netem qdisc).

    Raises:
        FaultError: the container is not running or has no eth0.
    """
    from pyroute2 import IPRoute, NetNS

    ctr.reload()
    pid = int(ctr.attrs["State"]["Pid"])
    if pid <= 0:
        raise FaultError(f"docker target: container {ctr.name} is not running")
    ns = NetNS(f"/proc/{pid}/ns/net")
    try:
        links = ns.link_lookup(ifname="eth0")
        if not links:
            raise FaultError(f"docker target: container {ctr.name} has no eth0")
        peer = ns.get_links(links[0])[0].get_attr("IFLA_LINK")
    finally:
        ns.close()
    with IPRoute() as ipr:
        found = ipr.get_links(peer)
        if not found:
            raise FaultError(f"docker target: the host end of {ctr.name}'s eth0 is gone")
        return str(found[0].get_attr("IFLA_IFNAME"))


def netns_path(ctr: Any) -> str:
    """``/proc/<pid>/ns/net`` of the container's init process.

    Raises:
        FaultError: the container is not running.
    """
    ctr.reload()
    pid = int(ctr.attrs["State"]["Pid"])
    if pid <= 0:
        raise FaultError(f"docker target: container {ctr.name} is not running")
    return f"/proc/{pid}/ns/net"


def reconnect(network: str, name: str, address: str) -> bool:
    """Connect container ``name`` to ``network`` with ``address`` unless it is connected
    already or gone (the revert of a partition); True when it was reconnected."""
    import docker.errors

    try:
        c = client()
        ctr = c.containers.get(name)
        net = c.networks.get(network)
    except (FaultError, docker.errors.NotFound):
        return False
    ctr.reload()
    if network in (ctr.attrs.get("NetworkSettings") or {}).get("Networks", {}):
        return False
    net.connect(ctr, ipv4_address=address)
    return True
