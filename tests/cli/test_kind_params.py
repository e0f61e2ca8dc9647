"""A fault kind with a parameter is one file: its model reaches the spec, the CLI, the listing
and the fault without any other file naming it.

The kind below is what a module of ``arfl.faults.kinds`` would hold; the fixture registers it
the way such a module does (the registry's decorator) and removes it afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from arfl.cli.main import main
from arfl.configs.load import parse_spec
from arfl.errors import FaultError, SpecError
from arfl.faults.base import FaultBase, FaultParams, make_fault
from arfl.params import Params
from arfl.registry import FAULTS, FaultInfo
from arfl.targets.base import Target
from arfl.testing.faults import write_state

KIND = "test-shake"


class ShakeParams(Params):
    """``level``: how hard, 1-5."""

    level: int = Field(2, ge=1, le=5, description="how hard, 1-5")

    def describe(self) -> list[str]:
        return [f"at level {self.level}"]


class Shake(FaultBase):
    kind = KIND

    def prepare(self, target: Target) -> dict[str, Any]:
        replica = self.replica_index(target)
        self.details = {"replica": replica, "level": self.own(ShakeParams).level}
        return {}

    def inject(self, target: Target) -> None:
        return None


@pytest.fixture
def shake() -> Iterator[None]:
    FAULTS.names()  # the real kinds first
    FAULTS.register(KIND, FaultInfo("shake a replica", takes_duration=True, params=ShakeParams))(
        Shake
    )
    try:
        yield
    finally:
        FAULTS._entries.pop(KIND, None)


def _spec(**entry: object) -> dict[str, object]:
    return {
        "name": "t",
        "source": {"topic": "in", "event_time": "ts"},
        "sink": {"topic": "out"},
        "chaos": [{"at": "5s", "fault": KIND, "replica": 0, "duration": "2s", **entry}],
    }


def test_the_spec_takes_the_kinds_keys(shake: None) -> None:
    spec = parse_spec(_spec(level=4))
    params = FaultParams.from_chaos(spec.chaos[0])
    assert params.options == ShakeParams(level=4)
    assert params.describe() == f"{KIND} replica 0 at level 4 for 2s"
    assert make_fault(params).own(ShakeParams).level == 4
    # the default, and the entry written back as a spec has it (flat)
    default = parse_spec(_spec()).chaos[0]
    assert default.params == ShakeParams()
    assert default.model_dump(mode="json", by_alias=True)["level"] == 2


def test_the_spec_refuses_what_the_model_refuses(shake: None) -> None:
    with pytest.raises(SpecError) as ei:
        parse_spec(_spec(level=9, force=True), "t.toml")
    problems = ei.value.problems
    assert "t.toml: chaos[0].level: Input should be less than or equal to 5" in problems
    assert f"t.toml: chaos[0].force: {KIND} takes no force (its own keys: level)" in problems
    with pytest.raises(SpecError, match=r"chaos\[0\]\.level: Input should be a valid integer"):
        parse_spec(_spec(level="3"), "t.toml")  # TOML types it: "3" is a string


def test_params_from_code_are_validated_by_the_same_model(shake: None) -> None:
    assert FaultParams.of(KIND, replica=0, level="3").options == ShakeParams(level=3)
    with pytest.raises(FaultError, match=f"{KIND}: level: Input should be greater than or equal"):
        FaultParams.of(KIND, replica=0, level=0)


def test_the_cli_offers_the_kinds_options(
    shake: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run_dir = write_state(tmp_path / "runs" / "r1", "r1", {0: {"driver_pid": sleeper.pid}})
        inject = ["chaos", "inject", str(run_dir), KIND, "-r", "0", "--dry-run"]
        assert main([*inject, "--level", "5"]) == 0
        out = capsys.readouterr().out
        assert f"{KIND} replica 0 at level 5 for 10s" in out and '"level": 5' in out
        assert main([*inject, "--level=1"]) == 0
        assert "at level 1" in capsys.readouterr().out
        assert main([*inject, "--level", "6"]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "--level: Input should be less than or equal to 5" in err
        assert main([*inject, "--cpu", "5"]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"{KIND} takes no --cpu (its own: --level)" in err
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert main(["chaos", "kinds", "--json"]) == 0
    rows = {r["kind"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[KIND]["params"] == [
        {"key": "level", "flag": "--level", "metavar": "LEVEL", "help": "how hard, 1-5"}
    ]
    assert rows["slow"]["params"][0]["flag"] == "--cpu"


def test_a_run_whose_spec_lists_every_kinds_keys_still_reports(tmp_path: Path) -> None:
    """A spec.json whose chaos entries carry every kind's keys, unset (null, ``restart``
    true), is read with each entry's own keys; a key set for a kind that does not take it is
    still an error."""
    import shutil

    from arfl.errors import ReportError
    from arfl.faults.kinds.partition import PartitionParams
    from arfl.faults.kinds.slow import SlowParams
    from arfl.measure.check.kafka import run_names
    from arfl.report.rundata import load_run

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "sim-active-kill"
    run = tmp_path / "run"
    shutil.copytree(fixture, run)
    raw = json.loads((run / "spec.json").read_text())
    unset = {"restart": True, "executor": None, "delay": None, "from": None, "cpu": None}
    raw["chaos"] = [{**unset, **c} for c in raw["chaos"]]
    (run / "spec.json").write_text(json.dumps(raw))
    spec = load_run(run).spec
    assert [c.fault for c in spec.chaos] == ["kill-replica", "pause"]
    # a kind's own key unset (null) is its default; the independent check reads it alike
    raw["chaos"] += [
        {**unset, "at": "20s", "fault": "slow", "replica": 1, "duration": "2s"},
        {**unset, "at": "25s", "fault": "partition", "replica": 1, "duration": "2s"},
    ]
    (run / "spec.json").write_text(json.dumps(raw))
    spec = load_run(run).spec
    assert [c.params for c in spec.chaos[2:]] == [SlowParams(), PartitionParams()]
    state = {
        "run": "run",
        "stack": {"kafka": "127.0.0.1:1"},
        "topics": {"source": "in", "sink": "out"},
    }
    (run / "state.json").write_text(json.dumps(state))
    assert run_names(run)[0] == spec
    raw["chaos"][1]["cpu"] = 5
    (run / "spec.json").write_text(json.dumps(raw))
    with pytest.raises(ReportError, match="not a spec this arfl version understands"):
        load_run(run)


def test_a_fault_on_the_merger_takes_no_replica() -> None:
    raw = {
        "name": "m",
        "source": {"topic": "in", "partitions": 2},
        "sink": {"topic": "out"},
        "replication": {"mode": "active", "replicas": 2},
        "chaos": [
            {"at": "5s", "fault": "kill-merger"},
            {"at": "9s", "fault": "pause-merger", "duration": "2s", "replica": 1},
        ],
    }
    with pytest.raises(SpecError) as e:
        parse_spec(raw)
    assert "chaos[1]" in str(e.value) and "acts on the merger" in str(e.value)
    assert "chaos[0]" not in str(e.value)
    with pytest.raises(FaultError, match="acts on the merger"):
        make_fault(FaultParams("kill-merger", replica=0))
