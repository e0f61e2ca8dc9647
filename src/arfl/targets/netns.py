"""Network isolation for network faults: a bridge on the host and one namespace per replica.

Layout for run ``R`` with bridge ``arfl-br<k>`` and subnet ``10.213.<k>.0/24``::

    host:  arfl-br<k>  10.213.<k>.1/24          (Kafka/ZooKeeper listen here for isolated runs)
             |-- arfl<k>r<N>h  (veth, host end)
    netns arfl-<R>-r<N>:  lo up, arfl<k>r<N>n  10.213.<k>.<N+2>/24, no default route

Everything goes through netlink (pyroute2); no shell. Commands run inside a namespace with
``nsenter --net=/run/netns/<name>`` (an exec, so the pid you get is the program's own).

A running docker daemon sets the iptables ``FORWARD`` policy to ``DROP`` and turns on
``bridge-nf-call-iptables``: frames between two namespaces on the bridge then cross the
``FORWARD`` chain and are dropped. Each bridge therefore gets one rule of its own at the top of
``FORWARD`` (``-i arfl-br<k> -o arfl-br<k> -j ACCEPT``, comment ``arfl:arfl-br<k>``), added with
the bridge and deleted with it. Partitions do not use iptables (links down, blackhole routes),
so the rule never lets a cut through. Traffic to Kafka/ZooKeeper on the bridge address goes
through ``INPUT``, which docker leaves alone.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from arfl.errors import FaultError
from arfl.registry import FAULTS
from arfl.run.state import IsolationState, NamespaceState

NETNS_DIR = Path("/run/netns")
SUBNET_BASE = "10.213"  # 10.213.<k>.0/24, k = bridge number; checked against this host's addresses
_CAP_NET_ADMIN = 12


def needs_isolation(kinds: Iterable[str]) -> bool:
    """True when any of these fault kinds needs the replicas in network namespaces."""
    return any(FAULTS.info(k).network for k in kinds if k in FAULTS)


def require_net_admin(what: str) -> None:
    """Raise unless this process may configure the network (root or CAP_NET_ADMIN).

    Raises:
        FaultError: no CAP_NET_ADMIN.
    """
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("CapEff:") and int(line.split()[1], 16) & (1 << _CAP_NET_ADMIN):
                return
    except OSError:
        if os.geteuid() == 0:
            return
    raise FaultError(
        f"{what} needs root or CAP_NET_ADMIN (network namespaces, veths, routes, qdiscs); "
        "run arfl with sudo or grant the capability"
    )


def _ipr() -> Any:
    from pyroute2 import IPRoute

    return IPRoute()


_CLONE_NEWNET = 0x40000000
_T = TypeVar("_T")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _in_thread(fn: Callable[[], _T]) -> _T:
    """Run ``fn`` in a fresh thread and return its result (re-raising its exception).

    Namespace changes (``unshare``/``setns``) apply to the calling *thread* only, so doing them
    in a throw-away thread leaves the rest of the process where it was. pyroute2's own netns
    helpers fork a child instead, which can deadlock in a multi-threaded process (a test
    process with kazoo and Spark threads hung for 10 min while creating namespaces that way).
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, name="arfl-netns", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    result: _T = box["result"]
    return result


def _create_namespace(name: str) -> None:
    """``ip netns add name`` without forking: unshare in a thread, bind-mount its netns."""
    from pyroute2 import netns

    def make() -> None:
        if _libc().unshare(_CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare(CLONE_NEWNET) failed: {os.strerror(err)}")
        netns.attach(name, f"self/task/{threading.get_native_id()}")

    _in_thread(make)


def ns_path(name: str) -> Path:
    """A namespace's file: ``/run/netns/<name>``, or ``name`` itself when it is an absolute
    path (a container's ``/proc/<pid>/ns/net``)."""
    return Path(name) if name.startswith("/") else NETNS_DIR / name


def _in_namespace(name: str, fn: Callable[[Any], _T]) -> _T:
    """Call ``fn(ipr)`` with an IPRoute socket inside namespace ``name`` (see :func:`ns_path`)."""

    def enter() -> _T:
        fd = os.open(ns_path(name), os.O_RDONLY)
        try:
            if _libc().setns(fd, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns({name}) failed: {os.strerror(err)}")
        finally:
            os.close(fd)
        with _ipr() as ipr:
            return fn(ipr)

    return _in_thread(enter)


def used_subnets() -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    used: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
    with _ipr() as ipr:
        for msg in ipr.get_addr(family=2):
            addr = msg.get_attr("IFA_ADDRESS")
            used.add(ipaddress.ip_network(f"{addr}/{msg['prefixlen']}", strict=False))
    return used


def _link_names() -> set[str]:
    with _ipr() as ipr:
        return {str(link.get_attr("IFLA_IFNAME")) for link in ipr.get_links()}


def veth_names(bridge_no: int, replica: int) -> tuple[str, str]:
    """Host-end and namespace-end veth names (kernel limit: 15 characters)."""
    return f"arfl{bridge_no}r{replica}h", f"arfl{bridge_no}r{replica}n"


def namespace_name(run: str, replica: int) -> str:
    """``arfl-<run>-r<N>``."""
    return f"arfl-{run}-r{replica}"


def list_namespaces() -> list[str]:
    """Names of the named network namespaces on this host."""
    from pyroute2 import netns

    return sorted(str(n) for n in netns.listnetns())


def create_isolation(
    run: str,
    replicas: Sequence[int],
    on_planned: Callable[[IsolationState], None] | None = None,
) -> IsolationState:
    """Create a bridge and one namespace per replica for ``run``.

    ``on_planned`` gets the description before the first link or namespace exists, so that a
    caller can record it first (a ``kill -9`` half-way then leaves a record recover can use).

    Returns:
        The ``isolation`` description deploy writes into ``state.json``.

    Raises:
        FaultError: not root, or no free bridge/subnet.
    """
    require_net_admin("network isolation")
    links = _link_names()
    used = used_subnets()
    for k in range(256):
        bridge = f"arfl-br{k}"
        subnet = ipaddress.ip_network(f"{SUBNET_BASE}.{k}.0/24")
        if bridge in links or any(subnet.overlaps(u) for u in used):
            continue
        if any(veth_names(k, r)[0] in links for r in replicas):
            continue
        break
    else:
        raise FaultError(
            f"network isolation: no free bridge arfl-br<k> / subnet {SUBNET_BASE}.k.0/24"
        )
    hosts = list(subnet.hosts())
    host_ip = str(hosts[0])
    iso = IsolationState(
        bridge=bridge,
        host_address=f"{host_ip}/24",
        namespaces={
            r: NamespaceState(
                name=namespace_name(run, r),
                address=str(hosts[1 + r]),
                veth_host=veth_names(k, r)[0],
                veth_ns=veth_names(k, r)[1],
            )
            for r in replicas
        },
    )
    if on_planned is not None:
        on_planned(iso)
    try:
        with _ipr() as ipr:
            ipr.link("add", ifname=bridge, kind="bridge")
            br = ipr.link_lookup(ifname=bridge)[0]
            ipr.addr("add", index=br, address=host_ip, prefixlen=24)
            ipr.link("set", index=br, state="up")
        allow_bridge_forwarding(bridge)
        for ns in iso.namespaces.values():
            assert ns.veth_host is not None and ns.veth_ns is not None
            _create_namespace(ns.name)
            with _ipr() as ipr:
                ipr.link("add", ifname=ns.veth_host, kind="veth", peer={"ifname": ns.veth_ns})
                host_end = ipr.link_lookup(ifname=ns.veth_host)[0]
                ipr.link("set", index=host_end, master=br, state="up")
                fd = os.open(NETNS_DIR / ns.name, os.O_RDONLY)
                try:
                    ipr.link("set", index=ipr.link_lookup(ifname=ns.veth_ns)[0], net_ns_fd=fd)
                finally:
                    os.close(fd)
            _in_namespace(ns.name, partial(_configure_inside, ns.veth_ns, ns.address))
    except Exception as e:
        teardown_isolation(iso)
        raise FaultError(f"network isolation for run {run}: setup failed ({e})") from e
    except BaseException:  # Ctrl-C, test timeouts: leave nothing half-built behind
        teardown_isolation(iso)
        raise
    return iso


def _configure_inside(veth: str, address: str, ipr: Any) -> None:
    inner = ipr.link_lookup(ifname=veth)[0]
    ipr.addr("add", index=inner, address=address, prefixlen=24)
    ipr.link("set", index=inner, state="up")
    ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")


def teardown_isolation(iso: IsolationState) -> list[str]:
    """Delete the namespaces, veths and bridge of ``iso`` (whatever of it exists).

    Returns:
        What was removed, for messages.
    """
    from pyroute2 import netns

    removed: list[str] = []
    present = set(list_namespaces())
    try:
        with _ipr() as ipr:
            for ns in iso.namespaces.values():
                if ns.veth_host:
                    for idx in ipr.link_lookup(ifname=ns.veth_host):
                        ipr.link("del", index=idx)
                        removed.append(ns.veth_host)
                if ns.name in present:
                    netns.remove(ns.name)
                    removed.append(ns.name)
            for idx in ipr.link_lookup(ifname=iso.bridge):
                ipr.link("del", index=idx)
                removed.append(iso.bridge)
    finally:
        if remove_bridge_forwarding(iso.bridge):
            removed.append(f"iptables FORWARD rule for {iso.bridge}")
    return removed


def _forward_rule(bridge: str) -> list[str]:
    return ["FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment",
            f"arfl:{bridge}", "-j", "ACCEPT"]  # fmt: skip


def _iptables(*args: str) -> subprocess.CompletedProcess[str] | None:
    exe = shutil.which("iptables")
    if exe is None:
        return None
    return subprocess.run([exe, "-w", *args], capture_output=True, text=True, check=False)


def allow_bridge_forwarding(bridge: str) -> None:
    """Let frames between the bridge's ports through ``FORWARD`` (see the module docstring).

    Without an ``iptables`` binary nothing is done: no docker daemon has set a ``DROP`` policy.

    Raises:
        FaultError: iptables refused the rule while bridged frames do cross a ``FORWARD``
            chain that drops (elsewhere a refusal changes nothing and is ignored).
    """
    check = _iptables("-C", *_forward_rule(bridge))
    if check is None or check.returncode == 0:
        return
    done = _iptables("-I", *_forward_rule(bridge)[:1], "1", *_forward_rule(bridge)[1:])
    if done is not None and done.returncode != 0 and _bridged_frames_dropped():
        raise FaultError(
            f"network isolation: iptables -I FORWARD for {bridge} failed: {done.stderr.strip()}"
            " (with bridge-nf-call-iptables on and FORWARD's policy DROP, as a docker daemon "
            "sets them, the replicas could not reach each other)"
        )


def _bridged_frames_dropped() -> bool:
    """True when frames between two ports of a bridge go through iptables' ``FORWARD`` and its
    policy drops them (a running docker daemon's setting)."""
    try:
        nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() == "1"
    except OSError:
        return False
    listing = _iptables("-S", "FORWARD")
    return nf and listing is not None and "-P FORWARD DROP" in listing.stdout


def remove_bridge_forwarding(bridge: str) -> bool:
    """Delete the bridge's ``FORWARD`` rule(s); True when one was there."""
    removed = False
    for _ in range(8):  # a crash between check and insert could have left a second copy
        done = _iptables("-D", *_forward_rule(bridge))
        if done is None or done.returncode != 0:
            break
        removed = True
    return removed


def namespaces_of_run(run: str) -> list[str]:
    """Namespaces on this host named for ``run`` (``arfl-<run>-r*``)."""
    prefix = f"arfl-{run}-r"
    return [n for n in list_namespaces() if n.startswith(prefix) and n[len(prefix) :].isdigit()]


def netns_command(name: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside namespace ``name`` (``ip netns exec`` equivalent).

    Raises:
        FaultError: the namespace does not exist or ``nsenter`` is missing.
    """
    path = NETNS_DIR / name
    if not path.exists():
        raise FaultError(f"network namespace {name} does not exist ({path})")
    nsenter = shutil.which("nsenter")
    if nsenter is None:
        raise FaultError("nsenter (util-linux) not found on PATH; it runs commands in namespaces")
    return [nsenter, f"--net={path}", "--", *argv]


def popen_in_netns(name: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """Start ``argv`` inside namespace ``name``; the returned pid is the program itself."""
    return subprocess.Popen(netns_command(name, argv), **kwargs)


def run_in_netns(
    name: str, argv: Sequence[str], *, timeout_s: float = 60.0, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """Run ``argv`` inside namespace ``name`` to completion."""
    return subprocess.run(netns_command(name, argv), timeout=timeout_s, check=False, **kwargs)


def set_link(ifname: str, up: bool) -> bool:
    """Set a host-side link up or down; False when the link is gone."""
    with _ipr() as ipr:
        idx = ipr.link_lookup(ifname=ifname)
        if not idx:
            return False
        ipr.link("set", index=idx[0], state="up" if up else "down")
        return True


def link_is_up(ifname: str) -> bool | None:
    """Administrative state of a host-side link (None when it does not exist)."""
    with _ipr() as ipr:
        idx = ipr.link_lookup(ifname=ifname)
        if not idx:
            return None
        return bool(ipr.get_links(idx[0])[0]["flags"] & 1)


def add_blackhole(ns_name: str, dst: str) -> None:
    """Drop traffic from namespace ``ns_name`` to ``dst`` (a /32 blackhole route)."""

    def add(ipr: Any) -> None:
        try:
            ipr.route("add", dst=f"{dst}/32", type="blackhole")
        except Exception as e:
            if getattr(e, "code", None) != errno.EEXIST:
                raise

    _in_namespace(ns_name, add)


def del_blackhole(ns_name: str, dst: str) -> bool:
    """Remove a blackhole route added by :func:`add_blackhole`; False when nothing to do."""
    if not ns_path(ns_name).exists():
        return False

    def delete(ipr: Any) -> bool:
        try:
            ipr.route("del", dst=f"{dst}/32", type="blackhole")
            return True
        except Exception as e:
            if getattr(e, "code", None) in (errno.ESRCH, errno.ENOENT):
                return False
            raise

    return _in_namespace(ns_name, delete)


def blackholes(ns_name: str) -> list[str]:
    """Destinations of blackhole routes in namespace ``ns_name``."""
    if not ns_path(ns_name).exists():
        return []

    def routes(ipr: Any) -> list[str]:
        return [
            str(r.get_attr("RTA_DST"))
            for r in ipr.get_routes(family=2)
            if r["type"] == 6  # RTN_BLACKHOLE
        ]

    return _in_namespace(ns_name, routes)


def add_netem(ifname: str, delay_s: float) -> None:
    """Add a root ``netem delay`` qdisc on host link ``ifname``.

    Raises:
        FaultError: the kernel has no sch_netem, or the link is gone.
    """
    with _ipr() as ipr:
        idx = ipr.link_lookup(ifname=ifname)
        if not idx:
            raise FaultError(f"delay: link {ifname} does not exist; is the run's isolation up?")
        try:
            ipr.tc("add", "netem", index=idx[0], handle="1:", delay=int(delay_s * 1_000_000))
        except Exception as e:
            if getattr(e, "code", None) == errno.ENOENT:
                raise FaultError(
                    "delay: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM / module "
                    f"sch_netem; 'tc qdisc add dev {ifname} root netem' fails with ENOENT); "
                    "load sch_netem or use a kernel that has it"
                ) from e
            raise FaultError(f"delay: cannot add netem qdisc on {ifname} ({e})") from e


def root_qdisc(ifname: str) -> str | None:
    """Kind of the root qdisc on ``ifname`` (None when the link is gone)."""
    with _ipr() as ipr:
        idx = ipr.link_lookup(ifname=ifname)
        if not idx:
            return None
        for q in ipr.get_qdiscs(idx[0]):
            if q["parent"] == 0xFFFFFFFF:
                return str(q.get_attr("TCA_KIND"))
        return None


def del_root_qdisc(ifname: str) -> bool:
    """Remove the root qdisc arfl added; False when there was nothing to remove."""
    with _ipr() as ipr:
        idx = ipr.link_lookup(ifname=ifname)
        if not idx:
            return False
        try:
            ipr.tc("del", index=idx[0], handle="1:", root=True)
            return True
        except Exception as e:
            if getattr(e, "code", None) in (errno.ENOENT, errno.EINVAL):
                return False
            raise
