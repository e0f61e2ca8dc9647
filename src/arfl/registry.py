"""Extension points: one registry per concept, filled by a decorator where each kind is written.

arfl has two kinds of plug-ins: **replication modes** (``arfl.replica.modes``: how a replica
reads, where its batches end, how it checkpoints) and **fault kinds** (``arfl.faults.kinds``:
how a fault is injected and reverted). Each module of those packages registers itself::

    @MODES.register("active-leaderless", ModeInfo(...))
    class ActiveLeaderlessReplication: ...

    @FAULTS.register("slow", FaultInfo(..., params=SlowParams))
    class Slow(FaultBase): ...

A registry imports every module of its package on first lookup (like entry points), so a new
mode or fault is one new file and nothing else names it: a fault kind's parameters are a model
in that file (:mod:`arfl.params`), from which the spec, the CLI and the report read them. The
registries live here, at the bottom of the import layers, because the spec validator
(``arfl.configs``) needs the names and metadata of modes and faults while the implementations
sit above it and import the spec.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from arfl.params import NoParams, Params

T = TypeVar("T")
C = TypeVar("C", bound=type)


class UnknownKind(LookupError):
    """A name no module of the registry's package registered; the message lists the known."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered kind: its name, its metadata and the class that implements it."""

    name: str
    info: T
    impl: type


class Registry(Generic[T]):
    """Kinds of one concept by name, discovered from the modules of one package.

    Args:
        what: what a kind is called in messages (``"replication mode"``, ``"fault"``).
        package: dotted name of the package whose modules register the kinds.
    """

    def __init__(self, what: str, package: str) -> None:
        self.what = what
        self.package = package
        self._entries: dict[str, Entry[T]] = {}
        self._loaded = False
        self._lock = threading.RLock()

    def register(self, name: str, info: T) -> Callable[[C], C]:
        """Class decorator: bind ``name`` to the decorated class with its metadata.

        Raises:
            ValueError: another class registered ``name`` already.
        """

        def wrap(cls: C) -> C:
            old = self._entries.get(name)
            if old is not None and old.impl.__qualname__ != cls.__qualname__:
                raise ValueError(f"{self.what} {name!r} registered twice")
            self._entries[name] = Entry(name, info, cls)
            return cls

        return wrap

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            pkg = importlib.import_module(self.package)
            for mod in pkgutil.iter_modules(pkg.__path__):
                if not mod.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{mod.name}")
            self._loaded = True

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self._load()
        return sorted(self._entries)

    def entry(self, name: str) -> Entry[T]:
        """The entry called ``name``.

        Raises:
            UnknownKind: nothing registered ``name`` (the message lists the known names).
        """
        self._load()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownKind(
                f"unknown {self.what} {name!r} (known: {', '.join(self.names())})"
            ) from None

    def info(self, name: str) -> T:
        """The metadata registered with ``name`` (see :meth:`entry`)."""
        return self.entry(name).info

    def get(self, name: str) -> Any:
        """The implementation class registered as ``name`` (see :meth:`entry`)."""
        return self.entry(name).impl

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries


@dataclass(frozen=True)
class ModeInfo:
    """What the spec validator and the CLI know about a replication mode.

    Attributes:
        summary: one line for listings.
        min_replicas: fewest replicas the mode runs.
        max_replicas: most replicas (None: no limit).
        options: the ``[replication]`` keys that only this mode (and others naming them) takes.
        triggers: the ``replication.trigger`` values the mode supports.
        active: several replicas at once whose outputs are merged.
        leader: the mode elects a leader (``kill-leader`` and ``replica = "leader"`` apply).
        coordination_free: replicas agree on nothing at run time (no shared batch
            boundaries): a pipeline whose results could depend on batching is refused.
        order: position in listings and experiments (baselines first).
        async_progress: a stateless micro-batch query tracks its progress asynchronously by
            default (``replica/app.async_progress``): the mode's restart replays a little
            more, harmlessly (the merger drops results it has; agreed batches replay alike).
        resumes_from_peers: a restarted replica may start from another replica's checkpoint or
            at the output frontier (``replication.resume``): replicas that agree on nothing and
            read Spark's Kafka source, whose state after an input prefix is the same in each.
        check: the mode's own checks of a ``[replication]`` section (a validated
            ``Replication``): the problems as ``(key, message)``.
    """

    summary: str
    min_replicas: int = 1
    max_replicas: int | None = 1
    options: frozenset[str] = frozenset()
    triggers: frozenset[str] = frozenset({"micro-batch"})
    active: bool = False
    leader: bool = False
    coordination_free: bool = False
    order: int = 0
    async_progress: bool = False
    resumes_from_peers: bool = False
    check: Callable[[Any], list[tuple[str, str]]] | None = None

    @property
    def agreed_batches(self) -> bool:
        """Active replicas that run the same, agreed batches (one per Spark batch, or several
        merged where the grouping cannot change a result: ``Spec.merges_agreed_batches``)."""
        return self.active and not self.coordination_free


def mode_names() -> list[str]:
    """Replication modes in listing order (baselines first, as experiments compare them)."""
    return sorted(MODES.names(), key=lambda m: (MODES.info(m).order, m))


@dataclass(frozen=True)
class FaultInfo:
    """What the spec validator and the CLI know about a fault kind.

    Attributes:
        summary: one line for listings.
        takes_duration: the fault lasts ``duration`` and is reverted then (else: instantaneous).
        network: needs network isolation (namespaces on a bridge) and root.
        targets_leader: aims at the current leader (``active-leader`` only).
        params: the kind's own parameters (the ``[[chaos]]`` keys beside ``at``, ``fault``,
            ``replica``, ``duration`` and ``after_boundary``; the options of ``arfl chaos
            inject``).
        kills: what the fault kills, if anything: a ``"replica"`` is back when it is ready
            again, an ``"executor"`` when Spark runs its replacement, the ``"merger"`` when a
            new one took over (the report's fault window).
        without_leader: the kind an experiment uses instead in a mode without a leader.
        on: what the fault acts on: a ``"replica"`` (``replica`` names it) or the run's
            ``"merger"`` (no replica).
        description: what the fault does beyond ``summary``, a few sentences for its user
            (``docs/faults.md``).
        reverted: how the fault ends: what its revert undoes, or what brings back what it
            killed.
        requires: what it needs of the host or the spec that the flags above do not say.
        docker: how it acts on the docker target; empty: as on local processes.
        journal: the journal events that follow from the fault besides the runner's own
            (``fault-injected``, ``fault-reverted``), each with when it is written:
            ``(event name, when)``.
    """

    summary: str
    takes_duration: bool
    network: bool = False
    targets_leader: bool = False
    params: type[Params] = NoParams
    kills: Literal["replica", "executor", "merger"] | None = None
    without_leader: str | None = None
    on: Literal["replica", "merger"] = "replica"
    description: str = ""
    reverted: str = ""
    requires: str = ""
    docker: str = ""
    journal: tuple[tuple[str, str], ...] = ()


MODES: Registry[ModeInfo] = Registry("replication mode", "arfl.replica.modes")
"""Replication modes, registered in :mod:`arfl.replica.modes`."""

FAULTS: Registry[FaultInfo] = Registry("fault", "arfl.faults.kinds")
"""Fault kinds, registered in :mod:`arfl.faults.kinds`."""
