"""The fault kinds' reference (``docs/faults.md``), generated from the registry so that it cannot
drift.

Each kind's entry comes from its registration (:class:`arfl.registry.FaultInfo`: what it does,
what it acts on, how it is reverted, what it needs, the journal events that follow) and its
parameters' model (:attr:`arfl.registry.FaultInfo.params`). ``make docs`` writes the file
(``python -m arfl.faults.reference docs/faults.md``); a unit test fails when it is stale.
"""

from __future__ import annotations

import sys
import textwrap

from arfl.configs.reference import (
    GENERATED_NOTE,
    UndocumentedError,
    code,
    key,
    markdown,
    table,
    write,
)
from arfl.params import cli_options
from arfl.registry import FAULTS, MODES, FaultInfo, mode_names
from arfl.run.events import Event

INTRO = (
    "A fault is injected by a `[[chaos]]` entry of a spec ([spec.md](spec.md#chaos)), `at` a "
    "time after the input started, or by hand: `arfl chaos inject RUN KIND`. A lasting fault "
    "holds for its `duration` and is then reverted. Its revert is written to the run's "
    "`pending-faults.json` before the fault is injected, and it runs at the end of the "
    "duration, on Ctrl-C, SIGTERM and errors; `arfl chaos recover RUN` undoes what a killed "
    "arfl left behind. Two lasting faults on the same processes, container, link or route do "
    "not stack: the second is refused (exit 5).",
    f"The journal (`journal.jsonl` in the run directory) has `{Event.FAULT_INJECTED}` and "
    f"`{Event.FAULT_REVERTED}` for every fault, `{Event.FAULT_ALIGNED}` for one placed "
    f"`after_boundary`, and `{Event.FAULT_FAILED}` for one that could not be injected; each "
    "kind below lists what follows from it.",
)
"""The document's opening paragraphs, wrapped when written."""


def _sentence(text: str) -> str:
    """``text`` as a sentence: capitalised (a kind's name at its start as code instead), with a
    full stop."""
    text = markdown(text).strip()
    head, _, rest = text.partition(" ")
    text = f"`{head}` {rest}" if head in FAULTS else text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def _acts_on(info: FaultInfo) -> str:
    if info.on == "merger":
        return "the serving merger (no `replica`)"
    if info.targets_leader:
        return "the current leader (no `replica`)"
    return 'a replica: `replica = N` (`"leader"` in `active-leader`); `--replica N`'


def _lasts(info: FaultInfo) -> str:
    if info.takes_duration:
        return "`duration`, then it is reverted (`--duration`)"
    return "an instant: no `duration`"


def _modes(info: FaultInfo) -> str:
    if not info.targets_leader:
        return "every mode"
    leaders = [m for m in mode_names() if MODES.info(m).leader]
    out = ", ".join(code(m) for m in leaders) + " only (a mode with a leader)"
    if info.without_leader:
        out += f"; `arfl experiment` uses {code(info.without_leader)} in the others"
    return out


def _needs(info: FaultInfo) -> str:
    needs = []
    if info.network:
        needs.append(
            "root or CAP_NET_ADMIN (on the local target each replica then runs in a network "
            "namespace of its own, with the run's own ZooKeeper and Kafka); not with "
            "`replication.standby`"
        )
    if info.requires:
        needs.append(markdown(info.requires))
    return _sentence("; ".join(needs)) if needs else "Nothing beyond a deployed run."


def _params(info: FaultInfo) -> str:
    """The table of a kind's own keys (spec key, command-line option, type, default ...)."""
    options = {o.key: o for o in cli_options(info.params)}
    rows = []
    for field, fi in info.params.model_fields.items():
        spec_key = fi.alias or field
        k = key(info.params, field, spec_key)
        rows.append(
            [code(spec_key), code(options[spec_key].usage), k.type, k.default, k.allowed,
             _sentence(k.description)]
        )  # fmt: skip
    if not rows:
        return "Its own keys: none."
    head = ["key", "option", "type", "default", "allowed", "description"]
    return "Its own keys (in a `[[chaos]]` entry, or as options of `arfl chaos inject`):\n\n" + (
        table(head, rows)
    )


def _journal(info: FaultInfo) -> str:
    if not info.journal:
        return f"`{Event.FAULT_INJECTED}`, `{Event.FAULT_REVERTED}`; nothing of its own."
    lines = [f"`{Event.FAULT_INJECTED}`, `{Event.FAULT_REVERTED}`; then, as it happens:"]
    known = {e.value for e in Event}
    for event, when in info.journal:
        if event not in known:
            raise UndocumentedError(f"{event!r} is not a journal event (arfl.run.events.Event)")
        lines.append(f"  * `{event}`: {markdown(when)}")
    return "\n".join(lines)


def kind_section(name: str) -> str:
    """One kind's section."""
    info = FAULTS.info(name)
    for field in ("summary", "description", "reverted"):
        if not getattr(info, field):
            raise UndocumentedError(f"fault kind {name!r} has no {field} in its FaultInfo")
    parts = [
        f"## `{name}`",
        "",
        f"{_sentence(info.summary)} {_sentence(info.description)}",
        "",
        f"* **Acts on:** {_acts_on(info)}.",
        f"* **Lasts:** {_lasts(info)}.",
        f"* **Modes:** {_modes(info)}.",
        "* **Targets:** `local`, and `docker`: "
        + (markdown(info.docker) if info.docker else "the same, the merger runs on this host")
        + ".",
        f"* **Needs:** {_needs(info)}",
        f"* **Reverted:** {_sentence(info.reverted)}",
        f"* **Journal:** {_journal(info)}",
        "",
        _params(info),
    ]
    return "\n".join(parts)


def overview() -> str:
    """One row per kind."""
    rows = []
    for name in FAULTS.names():
        info = FAULTS.info(name)
        own = ", ".join(code(o.key) for o in cli_options(info.params)) or "-"
        lasts = "`duration`" if info.takes_duration else "instant"
        on = info.on if not info.targets_leader else "the leader"
        rows.append([f"[`{name}`](#{name})", on, lasts, own, markdown(info.summary)])
    return table(["kind", "acts on", "lasts", "own keys", "what it does"], rows)


def faults_markdown() -> str:
    """``docs/faults.md``: every registered fault kind.

    Raises:
        UndocumentedError: a kind without a description, a revert or a summary, or a journal
            event that does not exist.
    """
    parts = [
        "# Fault kinds",
        "",
        GENERATED_NOTE.format(source="arfl.faults.reference"),
        "",
        *(
            textwrap.fill(paragraph, 96, break_on_hyphens=False, break_long_words=False) + "\n"
            for paragraph in INTRO
        ),
        overview(),
    ]
    for name in FAULTS.names():
        parts += ["", kind_section(name)]
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    """``python -m arfl.faults.reference [PATH]``: write docs/faults.md (stdout: no PATH)."""
    write(argv[0] if argv else None, faults_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
