"""The import layers of ``src/arfl``: a package imports only from layers below its own.

Every ``import``/``from ... import`` counts, also the ones inside functions and under
``TYPE_CHECKING``: a lazy upward import is still an upward dependency. The layers (bottom first)
are the ones ``docs/design.md`` describes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "arfl"

LAYERS: list[set[str]] = [
    # base: no arfl import but each other
    {"arfl", "errors", "paths", "units", "params", "registry", "coerce", "processes", "priority"},
    {"configs"},  # the spec language
    {"run"},  # run directory, record formats, progress, streams
    {"stack"},  # ZooKeeper + Kafka, embedded or external
    {"targets"},  # where replicas run and how faults reach them (processes, netns, docker)
    {"replica", "workload", "measure", "faults"},  # the processes of a run, and the chaos
    {"report"},  # reads finished runs
    {"orchestrate"},  # deploy, supervisor, rejoin, experiment
    {"cli", "testing"},  # the terminal, and the harness for tests (nothing imports either)
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def top_package(module: str) -> str:
    """``arfl.replica.modes.leader`` -> ``replica``; ``arfl`` -> ``arfl``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """Every arfl module a source imports (absolute and relative), with its line."""
    out: list[tuple[int, str]] = []
    package = module if module.count(".") == 0 else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "arfl"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.split(".")[0] == "arfl":
                out.append((node.lineno, name))
    return out


def violations(source: str, module: str) -> list[str]:
    """Imports of ``source`` (the module ``module``) that break the layering."""
    own = top_package(module)
    problems = []
    for line, target in imported_modules(source, module):
        other = top_package(target)
        if other == own:
            continue
        if own not in RANK or other not in RANK:
            problems.append(f"{module}:{line}: {target} (package not in any layer)")
        elif own in LAYERS[0] and other in LAYERS[0]:
            continue  # base modules import each other (units <- params <- registry)
        elif RANK[other] >= RANK[own] and not (own == "arfl" or other == "arfl"):
            problems.append(
                f"{module}:{line} imports {target}: {own!r} (layer {RANK[own]}) may import only "
                f"layers below it, not {other!r} (layer {RANK[other]})"
            )
        elif own in LAYERS[0] and other not in LAYERS[0]:
            problems.append(f"{module}:{line} imports {target}: the base layer imports no package")
    return problems


def test_every_package_is_in_a_layer() -> None:
    found = {p.stem if p.is_file() else p.name for p in SRC.iterdir() if not p.name.startswith("_")}
    found -= {"py"}  # py.typed
    assert found - {"py.typed"} <= set(RANK), f"add to LAYERS: {found - set(RANK)}"


def test_no_upward_or_sideways_import_between_top_level_packages() -> None:
    problems: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        problems += violations(path.read_text(), module_name(path))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("arfl.configs.spec", "from arfl.faults import registry\n"),  # upward
        ("arfl.faults.base", "def f():\n    from arfl.replica import query\n"),  # sideways, lazy
        ("arfl.orchestrate.deploy", "from arfl.testing import EmbeddedStack\n"),  # harness
        ("arfl.run.rundir", "import arfl.stack.topics\n"),  # plain import
        ("arfl.replica.modes.base", "from ...report import slo\n"),  # relative
        ("arfl.units", "from arfl.configs import spec\n"),  # base imports a package
    ],
)
def test_the_check_catches_an_upward_import(module: str, source: str) -> None:
    assert violations(source, module)


def test_the_check_allows_downward_and_same_package_imports() -> None:
    source = (
        "from arfl.errors import DeployError\nfrom arfl.configs.spec import Spec\n"
        "from arfl.run.rundir import Journal\nfrom .base import ModeBase\n"
    )
    assert violations(source, "arfl.replica.modes.leader") == []
    assert violations("from arfl.params import Params\n", "arfl.registry") == []
