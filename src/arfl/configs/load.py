"""Reading a spec: the TOML file, every problem at once with its key path.

``load_spec(path)`` returns a :class:`~arfl.configs.spec.Spec` or raises
:class:`~arfl.errors.SpecError` whose ``problems`` name *every* problem, e.g.
``clicks.toml: chaos[0].fault: unknown 'kil-executor' (known: delay, kill-executor, ...)``:
the models' own (:mod:`arfl.configs.spec`), the checks across sections
(:mod:`arfl.configs.checks`), the columns each step uses (:mod:`arfl.configs.schema`) and the
SLOs (:mod:`arfl.configs.slo`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from arfl.configs.checks import cross_checks, network_privilege_problems, raw_key
from arfl.configs.masking import with_chosen_defaults
from arfl.configs.schema import schema_problems
from arfl.configs.slo import validate_slo
from arfl.configs.spec import Spec
from arfl.errors import SpecError
from arfl.registry import FAULTS


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if loc[:1] == ("chaos",) and i == 2 and part == "params":
            continue  # a kind's own keys are written flat in the entry (Chaos._own_keys)
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or "[" in str(part):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _own_key_problem(raw: dict[str, Any], loc: tuple[Any, ...], kind: str) -> str | None:
    """A fault kind's own key that is unknown or missing, said in the kind's words."""
    if len(loc) != 4 or loc[0] != "chaos" or loc[2] != "params":
        return None
    chaos = raw.get("chaos")
    entry = chaos[loc[1]] if isinstance(chaos, list) and isinstance(loc[1], int) else None
    fault = entry.get("fault") if isinstance(entry, dict) else None
    if not isinstance(fault, str) or fault not in FAULTS:
        return None
    fields = FAULTS.info(fault).params.model_fields
    if kind == "extra_forbidden":
        own = ", ".join(sorted(f.alias or n for n, f in fields.items())) or "none"
        return f"{fault} takes no {loc[3]} (its own keys: {own})"
    field = next((f for n, f in fields.items() if (f.alias or n) == loc[3]), None)
    what = f" ({field.description})" if field is not None and field.description else ""
    return f"{fault} needs {loc[3]}{what}"


def _pydantic_problems(err: ValidationError, raw: dict[str, Any]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = e["msg"]
        if e["type"] in ("extra_forbidden", "missing") and (
            own := _own_key_problem(raw, loc, e["type"])
        ):
            msg = own
        elif e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "missing":
            msg = "required key is missing"
        msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if (
            e["type"] not in ("extra_forbidden", "missing")
            and "input" in e
            and not isinstance(e["input"], dict | list)
            and e["type"].endswith("_type")
        ):
            msg += f" (got {e['input']!r})"
        problems.append((_loc(loc), msg))
    return problems


def saved_spec(raw: Any) -> Spec:
    """The spec a run directory holds (``spec.json``, a dump of :class:`Spec`).

    Unset keys are left out of each ``[[chaos]]`` entry first: a null (TOML has none: it is a
    key nobody set) and ``restart = true`` where the kind takes no ``restart`` (a spec.json that
    lists every kind's keys in every entry); what is left is validated as a spec from a file
    is.

    Raises:
        ValidationError: it is not a spec this arfl understands.
    """
    chaos = raw.get("chaos") if isinstance(raw, dict) else None
    if isinstance(chaos, list):
        entries = []
        for c in chaos:
            if isinstance(c, dict):
                fault = c.get("fault")
                model = (
                    FAULTS.info(fault).params
                    if isinstance(fault, str) and fault in FAULTS
                    else None
                )
                takes = {f.alias or n for n, f in model.model_fields.items()} if model else set()
                c = {
                    k: v
                    for k, v in c.items()
                    if v is not None and not (k == "restart" and v is True and k not in takes)
                }
            entries.append(c)
        raw = {**raw, "chaos": entries}
    return Spec.model_validate(raw)


def parse_spec(raw: dict[str, Any], origin: str = "<spec>") -> Spec:
    """Validate an already-parsed TOML document.

    Raises:
        SpecError: with every problem found, each prefixed by ``origin: key.path:``.
    """
    problems: list[tuple[str, str]] = []
    spec: Spec | None = None
    raw, chosen = with_chosen_defaults(raw)
    try:
        spec = Spec.model_validate(raw)
    except ValidationError as err:
        problems.extend(_pydantic_problems(err, raw))
    problems.extend(cross_checks(raw))
    problems.extend(schema_problems(raw))
    slo = raw_key(raw, "report", "slo")
    if isinstance(slo, dict):
        for line in validate_slo(slo):
            loc, _, msg = line.partition(": ")
            problems.append((loc, msg))
    problems.extend(network_privilege_problems(raw))
    if problems:
        seen: set[tuple[str, str]] = set()
        lines = []
        for loc, msg in problems:
            if (loc, msg) not in seen:
                seen.add((loc, msg))
                lines.append(f"{origin}: {loc}: {msg}")
        raise SpecError(f"{origin}: {len(lines)} problem(s)", lines)
    assert spec is not None
    spec._chosen = tuple(chosen)
    return spec


def load_spec(path: str | Path) -> Spec:
    """Read and validate a TOML spec file.

    Raises:
        SpecError: the file is missing, is not TOML, or does not validate.
    """
    p = Path(path)
    origin = p.name
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{p}: cannot read: {e}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{origin}: not valid TOML: {e}", [f"{origin}: {e}"]) from None
    return parse_spec(raw, origin)
