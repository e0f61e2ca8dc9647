"""``arfl validate`` and the CLI error boundary: exit codes and messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from arfl.cli.commands import validate as validate_cmd
from arfl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for cmd in ("deploy", "chaos", "report", "experiment", "validate", "stack"):
        assert cmd in out


def test_valid_spec_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "configs" / "clicks.toml")]) == 0
    assert "ok" in capsys.readouterr().out


def test_invalid_spec_exits_2_with_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nextra = 1\n[source]\ntopic = "a"\npartitions = -1\n')
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml: extra: unknown key" in err
    assert "bad.toml: source.partitions:" in err
    assert "bad.toml: sink: required key is missing" in err
    assert "Traceback" not in err


def test_several_files_all_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text("name = 1\n")
    b.write_text("[[[\n")
    assert main(["validate", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "a.toml: name:" in err
    assert "b.toml: not valid TOML" in err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 2
    assert main(["no-such-command"]) == 2


def test_debug_shows_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--debug", "validate", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "no such file" in err


def test_experiment_with_unknown_modes_exits_2_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = ROOT / "configs" / "clicks.toml"
    code = main(["experiment", str(spec), "--modes", "none,eventual", "--runs", str(tmp_path)])
    assert code == 2
    assert "unknown mode 'eventual'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


_RTM_SPEC = """
name = "rtm"
[source]
topic = "clicks"
partitions = 2
event_time = "ts"
[[steps]]
window = { size = "1s", key = "user", watermark = "500ms", agg = { n = "count(*)" } }
[sink]
topic = "out"
[replication]
mode = "active"
replicas = 2
trigger = "realtime"
[spark]
master = "local-cluster[1,1,1024]"
"""


def test_valid_spec_says_what_it_asks_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(validate_cmd, "host_cores", lambda: 2)
    spec = tmp_path / "rtm.toml"
    spec.write_text(_RTM_SPEC)
    assert main(["validate", str(spec)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert (
        "rtm.toml: 2 replicas + 1 standby \u00d7 local-cluster[1,4,1024] "
        "(RTM: 2 partitions + 2 shuffle partitions = 4 task slots each) on 2 cores"
    ) in lines
    # the standby and the interval are arfl's masking defaults, said as such
    assert sum("rtm.toml: arfl sets replication." in line for line in lines) == 2, lines
    # why the master is not the spec's, on one line of its own
    [note] = [line for line in lines if line.startswith("rtm.toml: note: ")]
    assert "local-cluster[1,1,1024] has 1 task slot" in note
    assert "warning" not in captured.err
    # a tumbling window on generated input starts at a recent window after a restart
    assert (
        "rtm.toml: a restarted replica starts at a recent window's first events (a fresh "
        "checkpoint, about a window replayed: replication.resume)" in lines
    )


def test_a_stateless_active_spec_says_where_a_restart_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "rtm.toml"
    window = _RTM_SPEC[_RTM_SPEC.index("[[steps]]") : _RTM_SPEC.index("[sink]")]
    spec.write_text(_RTM_SPEC.replace(window, '[[steps]]\nfilter = "amount > 1"\n'))
    assert main(["validate", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "rtm.toml: a restarted replica starts at the output frontier" in out


def test_oversubscribed_host_is_a_warning_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(validate_cmd, "host_cores", lambda: 1)
    spec = tmp_path / "rtm.toml"
    spec.write_text(_RTM_SPEC.replace("partitions = 2", "partitions = 3"))
    assert main(["validate", str(spec)]) == 0
    captured = capsys.readouterr()
    assert "(RTM: 3 partitions + 2 shuffle partitions = 5 task slots each) on 1 core" in (
        captured.out
    )
    warning = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert warning == [
        "warning: rtm.toml: 2 replicas \u00d7 5 task slots = 10 on 1 core, more than 4 per core: "
        "RTM tasks mostly wait on Kafka; above that they compete for CPU and latency suffers; "
        "use fewer partitions or replicas, or a bigger host"
    ]


def test_micro_batch_spec_says_its_slots(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "configs" / "clicks-active.toml")]) == 0
    out = capsys.readouterr().out
    assert (
        "clicks-active.toml: 2 replicas \u00d7 local-cluster[1,1,1024] (micro-batch: 1 task slot"
        in (out)
    )


def test_realtime_spec_rtm_cannot_run_is_refused_with_key_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "rtm.toml"
    spec.write_text(
        _RTM_SPEC.replace(
            'trigger = "realtime"', 'trigger = "realtime"\ntrigger_interval = "1s"'
        ).replace("[[steps]]", '[[steps]]\ntransform = "m:f"\n[[steps]]', 1)
    )
    assert main(["validate", str(spec)]) == 2
    captured = capsys.readouterr()
    assert "rtm.toml: steps[0].transform: real-time mode runs only the operators" in captured.err
    assert "rtm.toml: replication.trigger_interval: 1s is below" in captured.err
    assert "task slots each" not in captured.out


_ISSUE_SPEC = """
name = "orders"
[source]
topic = "orders"
event_time = "ts"
[[steps]]
filter = "qty > 1"
[[steps]]
window = { size = "1s", key = "sku", agg = { n = "count(*)" } }
[sink]
topic = "orders-out"
"""


def test_a_pipeline_on_fields_the_workload_never_produces_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "orders.toml"
    spec.write_text(_ISSUE_SPEC)
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    known = "(known here: seq, user, amount, ts, sent_ms)"
    assert f"orders.toml: steps[0].filter: unknown column 'qty' {known}" in err
    assert f"orders.toml: steps[1].window.key: unknown column 'sku' {known}" in err
    assert "[workload.fields]" in err
    assert "Traceback" not in err


def test_a_fault_too_late_for_its_window_to_close_is_a_warning_naming_the_latest_at(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "late.toml"
    text = (ROOT / "configs" / "clicks-passive.toml").read_text()
    spec.write_text(
        text + '\n[[chaos]]\nat = "58s"\nfault = "pause"\nreplica = 0\nduration = "3s"\n'
    )
    assert main(["validate", str(spec)]) == 0
    captured = capsys.readouterr()
    late = [line for line in captured.err.splitlines() if "unjudged" in line]
    assert len(late) == 1, captured.err
    assert "chaos[1] (pause at 58s): its impact window needs at least 8 s" in late[0]
    assert "set at <= 52s" in late[0]


def test_a_spec_that_asks_for_masking_it_will_likely_not_get_is_told_what_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(validate_cmd, "host_cores", lambda: 2)
    # The demo's settings: nothing to say.
    assert main(["validate", str(ROOT / "configs" / "clicks.toml")]) == 0
    assert "will likely not mask" not in capsys.readouterr().err
    # The same pipeline as the README teaches it, with the defaults, at 1,500 ev/s: arfl sets
    # the standby and the interval itself and says so; only the rate is left to warn about.
    text = (ROOT / "configs" / "clicks.toml").read_text()
    assert not [k for k in ("trigger_interval", "standby", "after_boundary") if f"{k} =" in text]
    spec = tmp_path / "plain.toml"
    spec.write_text(text.replace("rate = 1000", "rate = 1500"))
    assert main(["validate", str(spec)]) == 0
    captured = capsys.readouterr()
    chosen = [line for line in captured.out.splitlines() if "arfl sets" in line]
    assert len(chosen) == 2, captured.out
    assert "replication.trigger_interval = '60s'" in chosen[0]
    assert "replication.standby = 1" in chosen[1]
    err = [line for line in captured.err.splitlines() if "will likely not mask" in line]
    assert len(err) == 1 and "workload.rate 1,500 ev/s x 2 replicas" in err[0], err
    # Written out against masking, each is named with what to set.
    spec.write_text(
        text.replace(
            'trigger = "realtime"', 'trigger = "realtime"\nstandby = 0\ntrigger_interval = "5s"'
        )
    )
    assert main(["validate", str(spec)]) == 0
    captured = capsys.readouterr()
    assert "arfl sets" not in captured.out
    err = [line for line in captured.err.splitlines() if "will likely not mask" in line]
    assert len(err) == 2, err
    assert "set replication.standby = 1" in err[0]
    assert 'set trigger_interval = "60s"' in err[1]


def test_a_fault_in_the_automatic_warmup_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The README's keys only: an active real-time spec (arfl's 60-s interval), warmup unset,
    # a kill at 20 s: the steady state starts after the replicas' first boundaries, ~63 s.
    text = (ROOT / "configs" / "clicks.toml").read_text()
    assert "warmup =" not in text
    spec = tmp_path / "early.toml"
    spec.write_text(text.replace('at = "115s"', 'at = "20s"'))
    assert main(["validate", str(spec)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "in the warm-up" in line]
    assert len(err) == 1, err
    assert "chaos[0] (kill-replica at 20s) comes in the warm-up" in err[0]
    assert "about 63 s here" in err[0] and "set at >= 63s" in err[0]


def test_cpu_shares_above_the_host_are_a_warning_and_docker_takes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(validate_cmd, "host_cores", lambda: 2)
    text = (ROOT / "configs" / "clicks-active.toml").read_text()
    spec = tmp_path / "placed.toml"
    spec.write_text(text + "\n[placement]\ncpus_per_replica = 1.5\n")
    assert main(["validate", str(spec)]) == 0
    err = capsys.readouterr().err
    assert (
        "warning: placed.toml: placement.cpus_per_replica 1.5 x (2 replicas) = 3 cores, more "
        "than this host's 2: the quotas overcommit it" in " ".join(err.split())
    ), err
    spec.write_text(text + "\n[placement]\ncpus_per_replica = 1\n")
    assert main(["validate", str(spec)]) == 0
    assert "placement" not in capsys.readouterr().err
    docker = tmp_path / "docker.toml"
    docker.write_text(
        text.replace("[spark]", '[spark]\ntarget = "docker"')
        + "\n[placement]\ncpus_per_replica = 1\n"
    )
    assert main(["validate", str(docker)]) == 0
    assert "placement" not in capsys.readouterr().err
