"""What a run's child processes are told: one typed config each, as a JSON file.

The merger, the injector and the replayer each take ``python -m <module> --config FILE``, like a
replica's driver. A config is a frozen dataclass with this mixin: its fields and the checks of
its ``__post_init__`` are its one definition; pydantic writes and reads its JSON (no key it
does not name, every value typed), so no command-line copy of its fields exists. Deploy writes
the files into the run directory (:meth:`arfl.run.rundir.RunPaths.child_config`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

from arfl.run.rundir import write_json_atomic

C = TypeVar("C", bound="ChildConfig")
T = TypeVar("T")

BAD_CONFIG_EXIT = 2
"""A config file that is missing or does not validate (a usage error: nothing ran)."""


class ChildConfig:
    """Mixin for a child process's frozen dataclass config.

    Attributes:
        module: what runs it (``python -m <module> --config FILE``).
    """

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")
    module: ClassVar[str]

    def to_json(self) -> Any:
        """The config as JSON values (paths as strings, tuples as lists)."""
        return TypeAdapter(type(self)).dump_python(self, mode="json")

    def write(self, path: Path) -> Path:
        """Write the config to ``path`` (atomically); returns ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, self.to_json())
        return path

    @classmethod
    def read(cls: type[C], path: Path) -> C:
        """Read a config written by :meth:`write`.

        Raises:
            OSError: the file cannot be read.
            pydantic.ValidationError: it is not such a config.
            arfl.errors.ArflError: the config's own checks refuse it.
        """
        return TypeAdapter(cls).validate_json(path.read_bytes())

    def command(self, path: Path, python: str | None = None) -> list[str]:
        """Write the config to ``path`` and return the command line that runs it.

        Args:
            path: where the config file goes.
            python: the interpreter (default: the current one).
        """
        self.write(path)
        return [python or sys.executable, "-m", self.module, "--config", str(path)]


def build_from_argv(
    cls: type[C], argv: Sequence[str] | None, description: str, build: Callable[[C], T]
) -> T | int:
    """A process entry's first steps: read ``--config FILE`` as ``cls``, then ``build`` the
    process's object from it (its constructor connects, checks topics, ...).

    Returns:
        What ``build`` returned, or the exit code after saying on stderr what went wrong: a
        file that is missing or does not validate, :data:`BAD_CONFIG_EXIT`; an ``ArflError``
        of the config's own checks or of ``build``, its exit code.
    """
    from arfl.errors import ArflError

    parser = argparse.ArgumentParser(prog=f"python -m {cls.module}", description=description)
    parser.add_argument("--config", type=Path, required=True, help="the JSON config file")
    args = parser.parse_args(argv)
    try:
        cfg = cls.read(args.config)
    except (OSError, ValidationError) as e:
        print(f"error: {args.config}: not a {cls.__name__}: {e}", file=sys.stderr)
        return BAD_CONFIG_EXIT
    except ArflError as e:
        print(f"error: {e}", file=sys.stderr)
        return int(e.exit_code)
    try:
        return build(cfg)
    except ArflError as e:
        print(f"error: {e}", file=sys.stderr)
        return int(e.exit_code)
