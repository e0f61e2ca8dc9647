"""``arfl chaos``: sub-commands, deprecated forms, exit codes and messages, against a real
(sleeping) process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from arfl.cli.commands.chaos import legacy_args
from arfl.cli.main import main
from arfl.processes import wait_until
from arfl.registry import FAULTS
from arfl.run.pending import PendingFaults
from arfl.run.rundir import read_jsonl
from arfl.targets.procs import identify
from arfl.testing.faults import write_state


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(10)


@pytest.fixture
def run_dir(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> Path:
    return write_state(tmp_path / "runs" / "r1", "r1", {0: {"driver_pid": sleeper.pid}})


def _flat(text: str) -> str:
    return " ".join(text.split())


# --- help and usage ---------------------------------------------------------------------------


def test_help_documents_the_forms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "--help"]) == 0
    out = _flat(capsys.readouterr().out)
    for sub, summary in [
        ("inject", "Inject one fault into a running deployment, then revert it."),
        ("list", "Show what a fault can target"),
        ("recover", "Undo faults left behind by an arfl that was killed"),
        ("kinds", "List the fault kinds 'inject' takes"),
    ]:
        assert f" {sub} {summary}" in out
    # the deprecated forms are named, with what replaces them
    assert "arfl chaos RUN FAULT [options]" in out and "(now 'inject')" in out
    assert "arfl chaos RUN --list" in out and "(now 'list')" in out
    assert "arfl chaos recover [RUN]" in out
    assert "kill-executor" in out and "exits 5" in out


@pytest.mark.parametrize(
    ("sub", "usage", "expected"),
    [
        (
            "inject",
            "RUN FAULT",
            [
                "--replica",
                "--duration",
                "--executor",
                "--delay",
                "--cpu",
                "--from",
                "--no-restart",
                "--dry-run",
                "--runs",
                "Ctrl-C",
                "exits 5",
                "kill-executor",
                "arfl chaos kinds",
            ],
        ),
        ("list", "RUN", ["--json", "--runs", "leader"]),
        ("recover", "[RUN]", ["--force", "--runs", "exits 5"]),
        ("kinds", "", ["--json", "fault kinds"]),
    ],
)
def test_each_subcommand_has_help(
    sub: str, usage: str, expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", sub, "--help"]) == 0
    out = _flat(capsys.readouterr().out)
    # typer >= 0.2x writes required arguments as {RUN}
    line = out.split("Usage: ", 1)[1].split(" ", 1)[1].replace("{", "").replace("}", "")
    assert line.startswith(f"chaos {sub} [OPTIONS] {usage}".rstrip())
    for text in expected:
        assert text in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inject"], "Missing argument 'RUN'"),
        (["inject", "r1"], "Missing argument 'FAULT'"),
        (["list"], "Missing argument 'RUN'"),
        (["kinds", "extra"], "unexpected extra argument"),
        (["inject", "r1", "pause", "--bogus"], "No such option: --bogus"),
        (["kind"], "No such command 'kind'. Did you mean 'kinds'?"),
        (["lst", "r1"], "No such command 'lst'. Did you mean 'list'?"),
    ],
)
def test_subcommand_usage_errors_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "deprecated" not in err


# --- kinds ------------------------------------------------------------------------------------


def test_kinds_lists_every_registered_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "kinds"]) == 0
    out = capsys.readouterr().out
    names = FAULTS.names()
    assert len(names) >= 7
    for name in names:
        assert f" {name} " in out
    assert "instant" in out and "--duration" in out


def test_kinds_json_matches_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "kinds", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["kind"] for r in rows] == FAULTS.names()
    for r in rows:
        info = FAULTS.info(r["kind"])
        assert r["summary"] == info.summary and r["summary"]
        assert r["takes_duration"] is info.takes_duration
        assert r["network"] is info.network


# --- list -------------------------------------------------------------------------------------


def test_list_shows_replicas_and_pids(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", "list", str(run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "r1" in out and str(sleeper.pid) in out and "running" in out
    assert "deprecated" not in err


def test_list_json(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", "list", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"] == "r1" and data["run_dir"] == str(run_dir.resolve())
    (rep,) = data["replicas"]
    assert rep["index"] == 0 and rep["state"] == "running"
    assert rep["driver_pid"] == sleeper.pid and sleeper.pid in rep["pids"]


def test_list_shows_the_standby_drivers(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    standby = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        run_dir = write_state(
            tmp_path / "r2", "r2", {0: {"driver_pid": sleeper.pid}}, standbys={3: standby.pid}
        )
        assert main(["chaos", "list", str(run_dir)]) == 0
        assert f"standby 3: driver {standby.pid}, pids {standby.pid}" in capsys.readouterr().out
        assert main(["chaos", "list", str(run_dir), "--json"]) == 0
        (sb,) = json.loads(capsys.readouterr().out)["standbys"]
        assert sb == {"index": 3, "pid": standby.pid, "pids": [standby.pid]}
    finally:
        standby.kill()
        standby.wait(10)
    assert main(["chaos", "list", str(run_dir)]) == 0
    assert f"standby 3: driver {standby.pid}, pids gone" in capsys.readouterr().out


def test_run_found_by_name_under_runs(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "list", "r1", "--runs", str(run_dir.parent)]) == 0
    assert "r1" in capsys.readouterr().out


def test_unknown_run_exits_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "list", str(tmp_path / "nope")]) == 5
    assert "no run directory with a state.json" in capsys.readouterr().err
    assert main(["chaos", "inject", str(tmp_path / "nope"), "pause", "-r", "0"]) == 5
    assert "no run directory with a state.json" in capsys.readouterr().err


# --- inject -----------------------------------------------------------------------------------


def test_dry_run_injects_nothing(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", "inject", str(run_dir), "pause", "--replica", "0", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "dry run" in out and str(sleeper.pid) in out
    assert "deprecated" not in err
    assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED
    assert not (run_dir / "journal.jsonl").exists()


def test_dry_run_says_a_fault_would_be_refused(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    # a pause of the same processes is pending (its injector runs: this test)
    PendingFaults(run_dir).add("pause", 0, {"via": "processes", "pids": identify([sleeper.pid])})
    assert main(["chaos", "inject", str(run_dir), "pause", "-r", "0", "--dry-run"]) == 5
    out, err = capsys.readouterr()
    assert "dry run" in out
    assert "it would be refused" in err and "already under a pause" in err
    assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED


def test_pause_by_hand_blocks_then_reverts(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", "inject", str(run_dir), "pause", "-r", "0", "--duration", "300ms"]) == 0
    out = capsys.readouterr().out
    assert "injected" in out and "reverted" in out
    assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED
    events = [
        json.loads(x)["event"] for x in (run_dir / "journal.jsonl").read_text().split("\n") if x
    ]
    assert events == ["fault-injected", "fault-reverted"]


def test_by_hand_after_a_batch_boundary(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--after-boundary``: the only replica's next batch end (a progress line appended every
    0.25 s from now on; an older line does not count), then 200 ms; nothing before."""
    progress = run_dir / "progress" / "replica-0.jsonl"
    progress.parent.mkdir(parents=True, exist_ok=True)
    progress.write_text('{"timestamp": "2026-11-29T07:00:00.000Z", "batchDuration": 1000}\n')
    ended: list[float] = []
    done = threading.Event()

    def batch_ends() -> None:
        while not done.wait(0.25):
            ended.append(time.time())
            start = datetime.fromtimestamp(ended[-1] - 0.5, UTC).isoformat(timespec="milliseconds")
            with progress.open("a") as f:
                f.write(json.dumps({"timestamp": start, "batchDuration": 500}) + "\n")

    writer = threading.Thread(target=batch_ends)
    writer.start()
    args = ["chaos", "inject", str(run_dir), "pause", "-r", "0", "--duration", "100ms"]
    try:
        assert main([*args, "--after-boundary", "200ms"]) == 0
    finally:
        done.set()
        writer.join()
    out = capsys.readouterr().out
    assert "waiting for a batch boundary, then 200ms" in out and "reverted" in out
    aligned, injected, _reverted = (
        json.loads(x) for x in (run_dir / "journal.jsonl").read_text().split("\n") if x
    )
    assert aligned["event"] == "fault-aligned" and aligned["boundary_replica"] == 0
    (boundary,) = [t for t in ended if abs(aligned["boundary"] - t) < 0.01]
    assert 0.2 <= injected["started"] - boundary < 0.5, (injected, boundary)
    assert main([*args, "--after-boundary", "soon"]) == 2
    assert "--after-boundary" in capsys.readouterr().err
    # A replica that does not exist fails before the wait, not after a boundary (or 120 s).
    t0 = time.monotonic()
    wrong = ["chaos", "inject", str(run_dir), "pause", "-r", "7", "--after-boundary", "1s"]
    assert main(wrong) == 5
    assert "has no replica 7" in capsys.readouterr().err and time.monotonic() - t0 < 10


def test_unknown_fault_is_a_usage_error_with_known_kinds(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", "inject", str(run_dir), "kil-executor", "-r", "0"]) == 2
    err = _flat(capsys.readouterr().err)
    assert "unknown fault 'kil-executor' (known: delay, kill-executor" in err
    assert f"(known: {', '.join(FAULTS.names())})" in err
    assert "arfl chaos kinds" in err and "Traceback" not in err
    # A usage error, told before the run is looked up.
    assert main(["chaos", "inject", str(tmp_path / "nope"), "kil-executor"]) == 2
    assert "unknown fault 'kil-executor'" in _flat(capsys.readouterr().err)


def test_kill_executor_without_executors_exits_5(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", "inject", str(run_dir), "kill-executor", "-r", "0"]) == 5
    err = capsys.readouterr().err
    assert "has no executor JVM" in err and "Traceback" not in err


def test_missing_replica_and_bad_duration(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inject = ["chaos", "inject", str(run_dir)]
    assert main([*inject, "pause", "-r", "7"]) == 5
    assert "has no replica 7" in capsys.readouterr().err
    assert main([*inject, "pause", "-r", "0", "--duration", "ten"]) == 2
    assert "--duration" in capsys.readouterr().err
    assert main([*inject, "kill-replica", "-r", "0", "--duration", "1s"]) == 2
    assert "kill-replica takes no duration" in capsys.readouterr().err
    assert main([*inject, "pause", "-r", "0", "--cpu", "5"]) == 2
    assert "pause takes no --cpu (it has no options of its own)" in capsys.readouterr().err
    assert main([*inject, "slow", "-r", "0", "--cpu", "0.5"]) == 2
    assert "--cpu: Input should be greater than or equal to 1" in _flat(capsys.readouterr().err)
    assert main([*inject, "delay", "-r", "0"]) == 2
    assert "delay needs --delay: the added latency" in _flat(capsys.readouterr().err)
    assert main([*inject, "partition", "-r", "0", "--from", "x"]) == 2
    assert "--from: Input should be a valid integer" in _flat(capsys.readouterr().err)
    assert main([*inject, "kill-replica", "-r", "0", "--no-restart=1"]) == 2
    assert "--no-restart takes no value" in _flat(capsys.readouterr().err)


# --- recover ----------------------------------------------------------------------------------


def test_recover_without_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "recover", "--runs", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "nothing to recover" in out and "deprecated" not in err


def test_recover_one_run_by_name(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "recover", "r1", "--runs", str(run_dir.parent)]) == 0
    out, err = capsys.readouterr()
    assert f"nothing pending in {run_dir.resolve()}" in _flat(out) and "deprecated" not in err


def test_recover_resumes_a_process_left_paused(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    # as if an 'arfl chaos inject ... pause' had been SIGKILLed mid-fault
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pending = PendingFaults(run_dir)
    pending.add("pause", 0, {"via": "processes", "pids": identify([sleeper.pid])})
    data = json.loads(pending.path.read_text())
    data["faults"][0]["owner_pid"] = dead.pid
    pending.path.write_text(json.dumps(data))
    os.kill(sleeper.pid, signal.SIGSTOP)
    assert main(["chaos", "recover", "--runs", str(run_dir.parent)]) == 0
    assert "reverted pause replica 0" in capsys.readouterr().out
    assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED
    assert not pending.path.exists()


# --- deprecated forms -------------------------------------------------------------------------

DEPRECATED_INJECT = "deprecated: 'arfl chaos RUN FAULT' is now 'arfl chaos inject RUN FAULT'"
DEPRECATED_LIST = "deprecated: 'arfl chaos RUN --list' is now 'arfl chaos list RUN'"


def test_old_list_form_still_works_with_one_deprecation_line(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", str(run_dir), "--list"]) == 0
    out, err = capsys.readouterr()
    assert "r1" in out and str(sleeper.pid) in out and "running" in out
    assert err.strip() == DEPRECATED_LIST
    # options before RUN were accepted too
    assert main(["chaos", "--runs", str(run_dir.parent), "r1", "--list"]) == 0
    out, err = capsys.readouterr()
    assert str(sleeper.pid) in out and err.strip() == DEPRECATED_LIST


def test_old_inject_form_still_works_with_one_deprecation_line(
    run_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", str(run_dir), "pause", "--replica", "0", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "dry run" in out and str(sleeper.pid) in out
    assert err.strip() == DEPRECATED_INJECT
    assert main(["chaos", str(run_dir), "pause", "-r", "0", "--duration", "300ms"]) == 0
    out, err = capsys.readouterr()
    assert "injected" in out and "reverted" in out and err.strip() == DEPRECATED_INJECT
    assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED


def test_old_inject_form_keeps_its_exit_codes(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", str(run_dir), "kil-executor", "-r", "0"]) == 2
    err = capsys.readouterr().err
    assert DEPRECATED_INJECT in err and "unknown fault 'kil-executor'" in _flat(err)
    assert main(["chaos", str(run_dir), "pause", "-r", "0", "--duration", "ten"]) == 2
    assert main(["chaos", str(run_dir)]) == 2
    assert "Missing argument 'FAULT'" in capsys.readouterr().err


def test_old_recover_forms_are_the_new_ones(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", "recover", str(run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "nothing pending" in out and err == ""
    # an option before 'recover' (the old single command took it anywhere)
    assert main(["chaos", "--runs", str(run_dir.parent), "recover", "r1"]) == 0
    out, err = capsys.readouterr()
    assert "nothing pending" in out and err == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["r1", "pause", "-r", "0"], ["inject", "r1", "pause", "-r", "0"]),
        (["-r", "0", "r1", "pause"], ["inject", "r1", "-r", "0", "pause"]),
        (["r1", "--list", "--runs", "x"], ["list", "r1", "--runs", "x"]),
        (["--runs", "x", "r1", "--list"], ["list", "r1", "--runs", "x"]),
        (["--runs", "x", "recover"], ["recover", "--runs", "x"]),
        (["--", "r1", "pause"], None),
        (["kind"], None),
        (["lst", "r1"], None),
        (["inject", "r1", "pause"], None),
        (["recover", "r1"], None),
        (["list", "r1"], None),
        (["--help"], None),
        ([], None),
    ],
)
def test_legacy_args_rewrites_only_old_forms(args: list[str], expected: list[str] | None) -> None:
    commands = {"inject", "list", "recover", "kinds"}
    values = {"-r", "--replica", "--duration", "--runs"}
    assert legacy_args(args, commands, values) == expected


# --- the merger -------------------------------------------------------------------------------


def test_the_merger_is_listed_paused_and_resumed_then_killed(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    merger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        run = write_state(
            tmp_path / "runs" / "r1", "r1", {0: {"driver_pid": sleeper.pid}}, merger=merger.pid,
            merger_standby=sleeper.pid,
        )  # fmt: skip
        assert main(["chaos", "list", str(run)]) == 0
        # The serving merger is the one merger faults act on; its standby is listed beside it.
        assert f"merger: pid {merger.pid}, standby pid {sleeper.pid}" in capsys.readouterr().out
        # A merger fault takes no replica.
        assert (
            main(["chaos", "inject", str(run), "pause-merger", "-r", "0", "--duration", "1s"]) != 0
        )
        capsys.readouterr()
        seen: list[str] = []
        code = "import sys; from arfl.cli.main import main; sys.exit(main(sys.argv[1:]))"
        inject = subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                "chaos",
                "inject",
                str(run),
                "pause-merger",
                "--duration",
                "2s",
            ]
        )
        wait_until(
            lambda: psutil.Process(merger.pid).status() == psutil.STATUS_STOPPED, timeout_s=20
        )
        seen.append("stopped")
        assert inject.wait(30) == 0
        assert psutil.Process(merger.pid).status() != psutil.STATUS_STOPPED  # reverted
        assert main(["chaos", "inject", str(run), "kill-merger"]) == 0
        assert merger.wait(10) == -signal.SIGKILL
        assert seen == ["stopped"] and psutil.Process(sleeper.pid).is_running()
        events = [e["event"] for e in read_jsonl(run / "journal.jsonl")]
        assert events.count("fault-injected") == 2 and events.count("fault-reverted") == 2
    finally:
        merger.kill()
        merger.wait(10)
