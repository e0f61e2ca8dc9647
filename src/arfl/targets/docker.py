"""The docker target's mechanisms, all through the docker SDK: the runtime image, a run's
network, its replica containers, and what faults and ``recover`` need of them.

Everything arfl creates carries labels (``arfl.run=<run>``, ``arfl.replica=<N>`` or
``arfl.standby=<K>``, ``arfl.kind=replica|standby|network|runtime``) and is found again by
label, never by name alone.

Layout of run ``R`` (network number ``k``)::

    host:  arfl-d<k>  10.214.<k>.1/24   docker bridge network "arfl-<R>" (labelled);
                                        the run's own ZooKeeper and Kafka listen here
    container arfl-<R>-r<N>:  10.214.<k>.<N+2>, the replica's driver, its local-cluster
                              worker and executor JVMs (real JVMs, inside the container)
    container arfl-<R>-s<K>:  10.214.<k>.<K%100+129>, standby driver K, warm; renamed
                              arfl-<R>-r<N> when it takes replica N over

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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arfl.errors import FaultError
from arfl.run.state import DockerNetState
from arfl.targets.cgroups import PERIOD_US, SHARE_PERIOD_US, quota_us

LABEL_RUN = "arfl.run"
LABEL_REPLICA = "arfl.replica"
LABEL_STANDBY = "arfl.standby"
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
FREEZE_ATTEMPTS = 5


class ContainerGone(FaultError):
    """The container does not exist (any more): removed with its run, or never created."""


_CLIENT: list[Any] = []


def client() -> Any:
    """A docker client for the daemon ``DOCKER_HOST`` names (default: the local socket), made
    and pinged once per process.

    Raises:
        FaultError: no daemon answers (the message says where it looked and what to do).
    """
    if _CLIENT:
        return _CLIENT[0]
    import docker

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        c = docker.from_env(timeout=60)
        c.ping()
    except Exception as e:
        raise FaultError(
            f"docker target: no docker daemon answers at {where} ({type(e).__name__}); start "
            "one (as root: scripts/docker-up, or apt-get install docker.io && dockerd &) or "
            "set DOCKER_HOST"
        ) from None
    _CLIENT.append(c)
    return c


@contextlib.contextmanager
def sdk_errors(what: str) -> Iterator[None]:
    """Turn the docker SDK's errors into arfl's: :class:`ContainerGone` for a missing
    container, :class:`FaultError` naming ``what`` for anything else the daemon refused."""
    import docker.errors

    try:
        yield
    except docker.errors.NotFound as e:
        raise ContainerGone(f"{what}: {e.explanation or e}") from None
    except docker.errors.DockerException as e:
        detail = getattr(e, "explanation", None) or e
        raise FaultError(f"{what}: the docker daemon refused: {detail}") from None


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
    return {d.lstrip("/"): os.readlink(d) for d in SYSTEM_DIRS if os.path.islink(d)}


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
    with sdk_errors(f"docker import of the runtime image {tag}"):
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


def container_name(run: str, replica: int) -> str:
    """The container of ``replica`` in ``run``."""
    return f"arfl-{run}-r{replica}"


def standby_container_name(run: str, standby: int) -> str:
    """The container of standby driver ``standby`` in ``run`` (until it takes a replica over
    and is renamed :func:`container_name`)."""
    return f"arfl-{run}-s{standby}"


STANDBY_CPU_SHARES = 15
"""CFS weight (``cpu_shares``) of a waiting standby's container against a replica's
:data:`DEFAULT_CPU_SHARES`: what niceness 19 is to a local standby's processes
(``orchestrate.standbys.STANDBY_NICE``). A niceness set inside a container weighs only
against the container's own processes; the container's cgroup is what competes with the
replicas'."""
DEFAULT_CPU_SHARES = 1024
"""Docker's default weight, which a standby's container gets when it takes a replica over."""

STANDBY_HOST_BASE = 128
"""Standby ``K`` has host ``STANDBY_HOST_BASE + K % 100`` of the run's /24 (the replicas have
hosts 1..R): a standby's address is free again long before a hundred more have started."""


def standby_address(subnet: str, standby: int) -> str:
    """Standby ``standby``'s address on the run's network (``subnet``: its /24)."""
    return str(list(ipaddress.ip_network(subnet).hosts())[STANDBY_HOST_BASE + standby % 100])


def rename(name: str, new_name: str) -> None:
    """Rename container ``name`` to ``new_name`` (whatever follows it by id is unaffected).

    Raises:
        FaultError: no daemon, the container is gone, or ``new_name`` is taken.
    """
    with sdk_errors(f"docker target: renaming container {name} to {new_name}"):
        client().api.rename(name, new_name)


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
    import docker.errors
    import docker.types

    c = client()
    name = network_name(run)
    tried: set[int] = set()
    while True:
        with sdk_errors("docker target: listing networks"):
            taken = _taken_subnets(c)
        k = next(
            (
                k
                for k in range(256)
                if k not in tried
                and not any(
                    ipaddress.ip_network(f"{SUBNET_BASE}.{k}.0/24").overlaps(t) for t in taken
                )
            ),
            None,
        )
        if k is None:
            raise FaultError(f"docker target: no free subnet {SUBNET_BASE}.<k>.0/24")
        tried.add(k)
        subnet = ipaddress.ip_network(f"{SUBNET_BASE}.{k}.0/24")
        hosts = list(subnet.hosts())
        gateway, bridge = str(hosts[0]), f"arfl-d{k}"
        ipam = docker.types.IPAMConfig(
            pool_configs=[docker.types.IPAMPool(subnet=str(subnet), gateway=gateway)]
        )
        try:
            c.networks.create(
                name,
                driver="bridge",
                ipam=ipam,
                labels={LABEL_RUN: run, LABEL_KIND: "network"},
                options={"com.docker.network.bridge.name": bridge},
            )
            break
        except docker.errors.APIError as e:  # another run took the subnet meanwhile: next one
            if "overlap" not in str(e).lower() and "in use" not in str(e).lower():
                raise FaultError(f"docker target: creating network {name}: {e}") from None
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
        What was removed, for messages; empty when there was nothing.

    Raises:
        FaultError: no daemon answers (nothing could be checked, so nothing is claimed).
    """
    c = client()
    removed: list[str] = []
    for ctr in c.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run}"}):
        remove_container(ctr.id)
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
    """Containers and networks labelled ``run`` that still exist.

    Raises:
        FaultError: no daemon answers.
    """
    c = client()
    flt = {"label": f"{LABEL_RUN}={run}"}
    return [f"container {x.name}" for x in c.containers.list(all=True, filters=flt)] + [
        f"network {n.name}" for n in c.networks.list(filters=flt)
    ]


# --- containers ---------------------------------------------------------------------------


def container(name: str) -> Any:
    """The container called (or with id) ``name``.

    Raises:
        ContainerGone: no such container.
        FaultError: no daemon.
    """
    c = client()
    with sdk_errors(f"docker target: container {name}"):
        return c.containers.get(name)


def status(name: str) -> str:
    """The container's state (``running``, ``paused``, ``exited``; ``gone`` when removed).

    Raises:
        FaultError: no daemon.
    """
    try:
        return str(container(name).status)
    except ContainerGone:
        return "gone"


def create_container(
    *,
    name: str,
    image: str,
    command: Sequence[str],
    network: str,
    address: str,
    labels: dict[str, str],
    environment: dict[str, str],
    mounts: list[Any],
    scratch: Sequence[str] = ("/tmp",),
    hostname: str | None = None,
    cwd: str = "/",
    cpus: float | None = None,
    cpu_shares: int | None = None,
) -> str:
    """Create (not start) a container at ``address`` on ``network``, with docker's init as
    PID 1, ``scratch`` directories as tmpfs and this host's uid:gid (what it writes in the run
    directory stays the deploying user's); a leftover container of the same name (its
    launcher was killed with -9) is removed first. ``cpus``: its CPU quota in cores, as a CFS
    quota per :data:`~arfl.targets.cgroups.SHARE_PERIOD_US` (not ``nano_cpus``, which docker
    refuses to combine with the quota a ``slow`` fault sets later); ``cpu_shares``: its CFS
    weight (None: docker's default). Returns its id.

    Raises:
        FaultError: no daemon, or the daemon refused.
    """
    c = client()
    remove_container(name)
    with sdk_errors(f"docker target: creating container {name}"):
        host_config = c.api.create_host_config(
            mounts=mounts,
            tmpfs={p: "exec,mode=1777" for p in scratch},
            init=True,
            network_mode=network,
            **({} if cpu_shares is None else {"cpu_shares": cpu_shares}),
            **(
                {}
                if cpus is None
                else {
                    "cpu_period": SHARE_PERIOD_US,
                    "cpu_quota": quota_us(cpus * 100, SHARE_PERIOD_US),
                }
            ),
        )
        net_config = c.api.create_networking_config(
            {network: c.api.create_endpoint_config(ipv4_address=address)}
        )
        created = c.api.create_container(
            image,
            command=list(command),
            name=name,
            hostname=hostname or name[-63:],
            labels=labels,
            environment=environment,
            user=f"{os.getuid()}:{os.getgid()}",
            working_dir=cwd,
            host_config=host_config,
            networking_config=net_config,
        )
    return str(created["Id"])


def remove_container(name: str) -> None:
    """Remove a container whatever its state (unpaused first); nothing when it is gone.

    Raises:
        FaultError: no daemon, or the daemon refused.
    """
    try:
        with sdk_errors(f"docker target: removing container {name}"):
            ctr = client().containers.get(name)
            if ctr.status == "paused":
                ctr.unpause()
            ctr.remove(force=True)
    except ContainerGone:
        return


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


def host_veth(ctr: Any) -> str:
    """The host end of the container's ``eth0`` veth (for a netem qdisc).

    Raises:
        FaultError: the container is not running or has no eth0.
    """
    from pyroute2 import IPRoute, NetNS

    ns = NetNS(netns_path(ctr))
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
    if connected(network, name) is not False:
        return False  # connected, or removed with its run: nothing is cut
    try:
        with sdk_errors(f"partition: reconnecting {name} to {network}"):
            client().networks.get(network).connect(name, ipv4_address=address)
    except ContainerGone:
        return False  # the network (or the container) went with its run meanwhile
    return True


def connected(network: str, name: str) -> bool | None:
    """Whether container ``name`` is on ``network`` (None: the container is gone)."""
    try:
        with sdk_errors(f"looking at {name}'s networks"):
            ctr = client().containers.get(name)
    except ContainerGone:
        return None
    return network in (ctr.attrs.get("NetworkSettings") or {}).get("Networks", {})


def disconnect(network: str, name: str) -> None:
    """Take container ``name`` off ``network`` (a partition).

    Raises:
        FaultError: the daemon refused (e.g. the container is not connected).
    """
    with sdk_errors(f"partition: disconnecting {name} from {network}"):
        client().networks.get(network).disconnect(name)


def kill(name: str) -> None:
    """SIGKILL every process of container ``name`` (``container.kill``).

    Raises:
        FaultError: the container is not running, or the daemon refused.
    """
    with sdk_errors(f"kill-replica: container {name}"):
        container(name).kill()


def pause(name: str) -> None:
    """Freeze container ``name`` (cgroup freezer).

    Raises:
        FaultError: not running, already paused, or the daemon refused.
    """
    ctr = container(name)
    for attempt in range(FREEZE_ATTEMPTS):
        try:
            with sdk_errors(f"pause: container {name}"):
                ctr.pause()
            return
        except FaultError as e:
            # runc's cgroup-v1 freezer gives up ("unable to freeze") when tasks of a busy
            # container keep forking or are in uninterruptible sleep; it thaws what it froze,
            # so another try is safe (seen here about once in ten pauses of two JVMs).
            if "unable to freeze" not in str(e) or attempt == FREEZE_ATTEMPTS - 1:
                raise
            time.sleep(0.2)


def unpause(name: str) -> bool:
    """Thaw container ``name`` if it is paused; False when it is not (or is gone)."""
    try:
        with sdk_errors(f"pause: unpausing container {name}"):
            ctr = container(name)
            ctr.reload()
            if ctr.status != "paused":
                return False
            ctr.unpause()
    except ContainerGone:
        return False
    return True


def cpu_quota(name: str) -> tuple[int, int] | None:
    """Container ``name``'s CFS ``(period, quota)`` in µs as created or last updated (None:
    unlimited, or the container is gone).

    Raises:
        FaultError: the daemon refused.
    """
    try:
        with sdk_errors(f"container {name}: its CPU quota"):
            host = container(name).attrs["HostConfig"]
    except ContainerGone:
        return None
    quota, period = int(host.get("CpuQuota") or 0), int(host.get("CpuPeriod") or 0)
    if quota <= 0:
        return None
    return (period or PERIOD_US), quota


def set_cpu_shares(name: str, shares: int) -> bool:
    """Set container ``name``'s CFS weight; False when the container is gone.

    Raises:
        FaultError: the daemon refused.
    """
    return _update(name, f"container {name}: its CPU weight", cpu_shares=shares)


def set_cpu_quota(name: str, period_us: int, quota_us: int) -> bool:
    """Set container ``name``'s CFS quota (``-1``: none); False when the container is gone.

    Raises:
        FaultError: the daemon refused.
    """
    return _update(name, f"slow: container {name}", cpu_period=period_us, cpu_quota=quota_us)


def _update(name: str, context: str, **fields: int) -> bool:
    """``container.update(**fields)``; False when the container is gone."""
    try:
        with sdk_errors(context):
            container(name).update(**fields)
    except ContainerGone:
        return False
    return True
