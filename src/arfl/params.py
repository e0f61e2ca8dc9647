"""Parameters a registered kind declares: one pydantic model per kind, read everywhere else.

A fault kind names its own parameters in its registration (``FaultInfo(params=SlowParams)``).
From that one model come the spec's ``[[chaos]]`` keys beside the common ones (validation and
key paths included), the options of ``arfl chaos inject`` (:func:`cli_options`,
:func:`parse_cli`), the kind's part of a fault's one-line description, and the typed values the
fault reads. A new parameter is a field of that model and nothing else.

On the command line a field is ``--<name>`` with a value (a list: comma-separated), a boolean
that defaults to true is ``--no-<name>``, one that defaults to false ``--<name>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, ValidationError

from arfl.units import format_duration, parse_duration

Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
"""Seconds, written with a unit ("20ms", "10s") in a spec and on the command line."""


class Params(BaseModel):
    """The base of every kind's parameters: strict as a TOML spec is typed, frozen, no key the
    model does not name (a mistyped key is an error, not a default)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    def describe(self) -> list[str]:
        """Words for the fault's one-line description (``to 5% of a CPU``); none by default."""
        return []

    def peers(self) -> tuple[int, ...]:
        """Replicas the fault involves besides its target (a partition's ``from``): their
        batch boundaries do not place it, and two faults that share them may stack."""
        return ()


class NoParams(Params):
    """A kind that takes no parameters."""


@dataclass(frozen=True)
class CliOption:
    """One field of a kind's parameters as a command-line option.

    Attributes:
        key: the spec key (the field's alias, else its name): what the model validates.
        flag: ``--cpu``, ``--no-restart``, ``--from``.
        metavar: what the value looks like (None: a flag without a value).
        help: the field's description.
    """

    key: str
    flag: str
    metavar: str | None
    help: str

    @property
    def usage(self) -> str:
        """``--cpu PERCENT`` or ``--no-restart``."""
        return f"{self.flag} {self.metavar}" if self.metavar else self.flag


def first_problem(err: ValidationError) -> tuple[str, str]:
    """The first problem of a validation error as (dotted key path, message): ``("cpu",
    "Input should be less than or equal to 100")``; a missing key's message is ``required``.
    Where one line must say what is wrong (a process's config, a fault from code or the
    command line); the spec lists every problem (:mod:`arfl.configs.load`)."""
    e = err.errors()[0]
    where = ".".join(str(p) for p in e["loc"])
    what = "required" if e["type"] == "missing" else str(e["msg"]).removeprefix("Value error, ")
    return where, what


class ParamError(ValueError):
    """A command-line parameter a kind does not take, or a value its model refuses.

    Attributes:
        flag: the option at fault (``--cpu``), for the usage error's hint.
    """

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message)
        self.flag = flag


def cli_options(model: type[Params]) -> list[CliOption]:
    """The command-line options of a kind's parameters, in the model's field order."""
    out = []
    for name, f in model.model_fields.items():
        key = f.alias or name
        dashed = key.replace("_", "-")
        help_ = f.description or ""
        if f.annotation is bool:
            flag = f"--no-{dashed}" if f.default is True else f"--{dashed}"
            out.append(CliOption(key, flag, None, help_))
            continue
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        metavar = extra.get("metavar")
        out.append(CliOption(key, f"--{dashed}", str(metavar or key.upper()), help_))
    return out


def parse_cli(model: type[Params], kind: str, args: list[str]) -> Params:
    """Validate command-line words (``["--cpu", "5"]``, ``["--from=1,2"]``) as ``model``.

    Values are strings here, so the model validates them leniently (``"5"`` is 5.0); a list
    field takes comma-separated items.

    Raises:
        ParamError: an option ``kind`` does not take, a missing value, or a value the model
            refuses (the message says which option and why).
    """
    options = {o.flag: o for o in cli_options(model)}
    lists = {
        f.alias or n for n, f in model.model_fields.items() if get_origin(f.annotation) is list
    }
    values: dict[str, Any] = {}
    flags: dict[str, str] = {}
    words = iter(args)
    for word in words:
        flag, eq, value = word.partition("=")
        opt = options.get(flag)
        if opt is None:
            takes = ", ".join(o.flag for o in options.values())
            its = f"its own: {takes}" if takes else "it has no options of its own"
            raise ParamError(flag, f"{kind} takes no {flag} ({its})")
        if opt.metavar is None:
            if eq:
                raise ParamError(flag, f"{flag} takes no value")
            values[opt.key] = not flag.startswith("--no-")
        else:
            if not eq:
                nxt = next(words, None)
                if nxt is None:
                    raise ParamError(flag, f"{flag} needs a value ({opt.metavar})")
                value = nxt
            values[opt.key] = (
                [x.strip() for x in value.split(",") if x.strip()] if opt.key in lists else value
            )
        flags[opt.key] = flag
    try:
        return model.model_validate(values, strict=False)
    except ValidationError as e:
        key, msg = first_problem(e)
        key = key.split(".", 1)[0]
        opt = next((o for o in options.values() if o.key == key), None)
        flag = flags.get(key) or (opt.flag if opt else key)
        if msg == "required":
            hint = f": {opt.help}" if opt and opt.help else ""
            raise ParamError(flag, f"{kind} needs {flag}{hint}") from None
        raise ParamError(flag, f"{flag}: {msg}") from None
