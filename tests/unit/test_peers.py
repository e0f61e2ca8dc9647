"""bench/peers.py's own arithmetic and texts: the probe's statistics, gaps, the time back to
steady, the table, the peers' configurations (the runs themselves start JVMs: not here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000_000
"""The input's first intended send time (epoch ms) of the synthetic runs."""


@pytest.fixture(autouse=True)
def _bench_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "peers"))


def _run(
    seconds: int = 40,
    rate: int = 100,
    latency_ms: float = 5.0,
    stall: tuple[float, float] | None = None,
) -> list[Any]:
    """A synthetic run: ``rate`` events a second, each arriving ``latency_ms`` after its ts,
    except that nothing arrives during ``stall`` = (from, to) seconds of input: what was sent
    then, or is due then, arrives at ``to``."""
    from peer_stats import Sample

    out = []
    for seq in range(seconds * rate):
        ts = T0 + seq * 1000 // rate
        arrival = ts + latency_ms
        if stall is not None and T0 + 1000 * stall[0] <= arrival < T0 + 1000 * stall[1]:
            arrival = T0 + 1000 * stall[1]
        out.append(Sample(arrival, ts, seq))
    return out


def test_a_stall_after_the_fault_shows_in_window_gap_and_recovery() -> None:
    from peer_stats import Timing, analyse

    samples = _run(stall=(20.0, 23.5))
    timing = Timing(T0, 40.0, 5.0, 20.0, 10.0)
    row = analyse(samples, timing, {s.seq for s in samples}, tolerance=1.1, hold=5)
    assert row["steady_p50"] == pytest.approx(5.0, rel=0.01)
    assert row["steady_p99"] == pytest.approx(5.0, rel=0.01)
    assert row["steady_count"] == 1000  # 5 s .. 15 s at 100/s: the impact window starts at 15 s
    # The first event sent in the window waited the whole stall.
    assert row["window_max"] == pytest.approx(3500.0, rel=0.01)
    assert row["window_p99"] > 1000.0
    # The last arrival before the stall (due at 20 s - 5 ms ... sent at 19.99 s) to 23.5 s.
    assert row["window_gap_ms"] == pytest.approx(3500.0 - 5.0 + 10.0, abs=1.0)
    # Input sent from second 23 on had arrivals at 23.5 s at the latest: second 23's p99 is
    # ~500 ms, second 24 is the first whose whole run of 5 is steady.
    assert row["back_to_steady_s"] == pytest.approx(4.0)
    assert (row["missing"], row["duplicates"], row["extra"]) == (0, 0, 0)
    assert len(row["seconds"]) == 40


def test_input_delayed_past_the_window_still_counts_against_it() -> None:
    from peer_stats import Timing, analyse

    # Nothing arrives from 20 s to 32 s of input: the whole 10-s window's input comes late.
    samples = _run(stall=(20.0, 32.0))
    row = analyse(samples, Timing(T0, 40.0, 5.0, 20.0, 10.0), {s.seq for s in samples})
    assert row["window_count"] == 1500  # 15 s .. 30 s
    assert row["window_p99"] > 11_000.0
    assert row["window_gap_ms"] == pytest.approx(12_005.0, abs=1.0)
    assert row["back_to_steady_s"] == pytest.approx(12.0)


def test_input_in_flight_at_the_fault_counts_against_the_window_not_the_steady_state() -> None:
    from peer_stats import Sample, Timing, analyse

    # A kill at 20 s loses what was sent in the 2 s before it; it comes again 6 s later.
    samples = [
        Sample(s.arrival_ms + (6000.0 if 18_000 <= s.ts_ms - T0 < 20_000 else 0.0), s.ts_ms, s.seq)
        for s in _run()
    ]
    row = analyse(samples, Timing(T0, 40.0, 5.0, 20.0, 10.0), {s.seq for s in samples})
    assert row["steady_max"] == pytest.approx(5.0, abs=0.5)
    assert row["window_max"] > 5000.0


def test_back_to_steady_is_judged_against_the_steady_seconds_not_the_whole_phase() -> None:
    from peer_stats import Sample, Timing, analyse

    # Every 4th second 2 of its 100 records take 40 ms: its own p99 is 40 ms, the phase's 5 ms
    # (0.5% of its records). The fault changes nothing: the run is back at once.
    def slow(s: Any) -> bool:
        return (s.ts_ms - T0) // 1000 % 4 == 0 and s.seq % 100 < 2

    samples = [Sample(s.arrival_ms + (35.0 if slow(s) else 0.0), s.ts_ms, s.seq) for s in _run()]
    row = analyse(samples, Timing(T0, 40.0, 5.0, 20.0, 10.0), {s.seq for s in samples})
    assert row["steady_p99"] == pytest.approx(5.0, abs=0.5)
    assert row["steady_second_p99_ms"] == pytest.approx(40.0, abs=0.5)
    assert row["back_to_steady_s"] == pytest.approx(0.0)


def test_a_fault_free_run_has_no_window_figures() -> None:
    from peer_stats import Timing, analyse

    samples = _run(seconds=10)
    row = analyse(samples, Timing(T0, 10.0, 2.0, None, 5.0), {s.seq for s in samples})
    assert row["steady_count"] == 800
    assert "window_p99" not in row and "back_to_steady_s" not in row


def test_correctness_counts_missing_duplicates_and_extra_by_seq() -> None:
    from peer_stats import correctness

    got = correctness([0, 1, 1, 1, 3, 7], {0, 1, 2, 3})
    assert got == {"results": 6, "distinct": 4, "missing": 1, "duplicates": 2, "extra": 1}


def test_expected_seqs_are_the_events_the_filter_keeps() -> None:
    from peer_stats import expected_seqs

    from arfl.workload.injector import event_fields

    kept = expected_seqs(100, 10.0, 1, 100, 10.0)
    everything = expected_seqs(100, 10.0, 1, 100, None)
    assert everything == set(range(1000))
    assert kept == {s for s in range(1000) if event_fields(1, s, 100)[1] > 10.0}
    # About 90 % of the amounts in [0, 100) exceed 10.
    assert 850 < len(kept) < 950


def test_longest_gap_counts_stretches_across_the_window_edges() -> None:
    from peer_stats import longest_gap_ms

    arrivals = [0.0, 100.0, 200.0, 1200.0, 1300.0]
    # The 1-s gap starts inside [150, 250] and ends after it: it counts whole.
    assert longest_gap_ms(arrivals, 150.0, 250.0) == 1000.0
    # One that started before the window counts whole too.
    assert longest_gap_ms(arrivals, 500.0, 600.0) == 1000.0
    # Output that never resumes: up to the window's end.
    assert longest_gap_ms(arrivals, 1250.0, 5000.0) == 3700.0
    # No output before the window's end at all: nothing to measure.
    assert longest_gap_ms([], 0.0, 10.0) is None
    assert longest_gap_ms([50.0], 0.0, 10.0) is None


def test_back_to_steady_needs_hold_good_seconds_in_a_row() -> None:
    from peer_stats import Second, back_to_steady_s

    def sec(s: int, p99: float | None, n: int = 100) -> Any:
        return Second(s, n, p99, p99, p99)

    good, bad = 5.0, 900.0
    # Second 12 alone is good, then bad again: the first run of 3 starts at 15.
    p99s = [good] * 10 + [bad, bad, good, bad, bad, good, good, good, good, good]
    seconds = [sec(i, p) for i, p in enumerate(p99s)]
    assert back_to_steady_s(seconds, 10.4, 6.0, 3) == pytest.approx(4.6)
    # A fault that changed nothing: 0, not the distance to the next second.
    calm = [sec(i, good) for i in range(20)]
    assert back_to_steady_s(calm, 10.4, 6.0, 3) == 0.0
    # A second without output is not steady, whatever its p99 says.
    empty = [sec(i, None if 10 <= i < 16 else good, 0 if 10 <= i < 16 else 100) for i in range(20)]
    assert back_to_steady_s(empty, 10.0, 6.0, 3) == 6.0
    # Never within the input.
    assert back_to_steady_s(seconds[:17], 10.4, 6.0, 3) is None


def test_markdown_table_formats_every_row_with_the_same_columns() -> None:
    from peer_stats import COLUMNS, markdown_table

    rows: list[dict[str, Any]] = [
        {
            "system": "flink alo",
            "fault": "kill-taskmanager",
            "steady_p50": 3.25,
            "steady_p99": 19.04,
            "steady_p99_9": 46.0,
            "window_p99": 12345.6,
            "window_gap_ms": 12300.0,
            "back_to_steady_s": None,
            "missing": 0,
            "duplicates": 128,
            "cpu_s": 97.0,
            "steady_cores": 0.4567,
            "rss_peak_mib": 1234.5,
        },
        {"system": "kstreams", "fault": None, "error": "PeerError: mvn | failed"},
    ]
    lines = markdown_table(rows).splitlines()
    assert lines[0].startswith("| system | fault | p50 | p99 | p99.9 | window p99 |")
    assert all(line.count("|") == len(COLUMNS) + 3 for line in lines)
    assert lines[2] == (
        "| flink alo | kill-taskmanager | 3.25 | 19.0 | 46.0 | 12,346 | 12,300 | - | 0 | 128"
        " | 97.0 | 0.46 | 1,234 |"
    )
    # A failed run says so, its "|" kept from breaking the row; no fault reads "none".
    assert lines[3].startswith("| kstreams | none | failed: PeerError: mvn / failed |")


def test_the_probe_reads_flat_and_arfl_records() -> None:
    from peer_probe import extract

    assert extract({"seq": 7, "user": "u1", "amount": 12.5, "ts": 1000}) == (1000, 7)
    arfl = {"rid": "0:7", "src_ts": 999, "data": {"seq": 7, "ts": 1000, "amount": 12.5}}
    assert extract(arfl) == (1000, 7)
    # Without ts in the data, arfl's src_ts is the event's.
    assert extract({"rid": "0:7", "src_ts": 999, "data": {"seq": 7}}) == (999, 7)
    assert extract({"eoi": True, "ts": 5}) is None
    assert extract({"seq": True, "ts": 5}) is None
    assert extract([1, 2]) is None


def test_the_probe_file_is_read_line_by_line_as_it_grows(tmp_path: Path) -> None:
    from peer_probe import HEADER, ProbeFile

    path = tmp_path / "probe.csv"
    probe = ProbeFile(path)
    assert probe.poll() == 0  # not written yet
    path.write_text(f"{HEADER}\n1000.5,990,1,995\n2000.0,1990,2,")
    assert probe.poll() == 1  # the second line is not complete yet
    with path.open("a") as f:
        f.write("\n3000.0,2990,2,2995\n# unparsed 4\n")
    assert probe.poll() == 2
    assert [s.seq for s in probe.samples] == [1, 2, 2]
    assert probe.samples[1].out_ms is None and probe.samples[2].out_ms == 2995.0
    assert probe.unparsed == 4
    assert probe.seen({1, 2, 3}) == 2


def test_sampled_cpu_and_memory_leave_the_shared_processes_out() -> None:
    from peer_sampler import MIB, Point, cores, cpu_s, own, rss_mib

    points = [
        Point(100.0, {"jobmanager": 1.0, "kafka": 50.0, "host": 1000.0}, {"jobmanager": 100 * MIB}),
        Point(
            101.0,
            {"jobmanager": 1.5, "taskmanager": 2.0, "kafka": 50.5, "host": 1002.0},
            {"jobmanager": 100 * MIB, "taskmanager": 300 * MIB, "kafka": 900 * MIB},
        ),
        Point(
            103.0,
            {"jobmanager": 2.5, "taskmanager": 4.0, "kafka": 51.5, "host": 1005.0},
            {"jobmanager": 120 * MIB, "taskmanager": 200 * MIB, "kafka": 900 * MIB},
        ),
    ]
    life = cpu_s(points)
    assert life == {"jobmanager": 1.5, "taskmanager": 4.0, "kafka": 1.5, "host": 5.0}
    assert own(life) == 5.5  # the broker and the host are not the system's
    steady = cores(points, 101.0, 103.0)
    assert steady["taskmanager"] == pytest.approx(1.0)
    assert own(steady) == pytest.approx(1.5)
    assert cores(points, 102.0, 103.0) == {}  # one sample: no rate
    peak, mean = rss_mib(points)
    assert peak == 400.0 and mean == pytest.approx(820 / 3)


def test_flink_sql_and_config_follow_the_guarantee_and_heartbeat(tmp_path: Path) -> None:
    from peer_flink import flink_config, flink_sql, render_yaml

    alo = flink_sql("127.0.0.1:9092", "in-1", "out-1", "at-least-once", "r1", 1.0)
    eos = flink_sql("127.0.0.1:9092", "in-1", "out-1", "exactly-once", "r'2", 1.0)
    assert "'sink.delivery-guarantee' = 'at-least-once'" in alo
    assert "transactional-id-prefix" not in alo
    assert "'sink.transactional-id-prefix' = 'peers-flink-r''2'" in eos
    assert "'properties.transaction.timeout.ms' = '900000'" in eos
    assert "WHERE amount > 10;" in alo and "SELECT seq, `user`, amount, ts" in alo
    ports = {"rpc": 1, "rest": 2, "blob": 3}
    fast = flink_config(tmp_path, ports, "exactly-once", "fast", 1000, "-Dx=1")
    default = flink_config(tmp_path, ports, "at-least-once", "default", 1000, "-Dx=1")
    assert (fast["heartbeat.interval"], fast["heartbeat.timeout"]) == ("1000 ms", "5000 ms")
    assert fast["execution.checkpointing.interval"] == "1000 ms"
    assert "heartbeat.interval" not in default
    assert fast["execution.checkpointing.mode"] == "EXACTLY_ONCE"
    assert default["execution.checkpointing.mode"] == "AT_LEAST_ONCE"
    assert all(v == "127.0.0.1" for k, v in fast.items() if k.endswith(("address", "host")))
    assert render_yaml({"a.b": 'x "y"'}) == 'a.b: "x \\"y\\""\n'


def test_flink_java_options_come_from_the_distributions_config(tmp_path: Path) -> None:
    from peer_flink import java_opts
    from peer_systems import PeerError

    (tmp_path / "conf").mkdir()
    config = tmp_path / "conf" / "config.yaml"
    config.write_text(
        "# comment\nenv:\n  java:\n    opts:\n      all: --add-opens=java.base/java.lang=ALL"
        "-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED\n\njobmanager:\n  bind-host: x\n"
    )
    assert java_opts(tmp_path) == (
        "--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED"
    )
    config.write_text("jobmanager:\n  bind-host: x\n")
    with pytest.raises(PeerError, match=r"no env\.java\.opts\.all"):
        java_opts(tmp_path)


def test_kafka_streams_properties_follow_the_session_choice(tmp_path: Path) -> None:
    from peer_kstreams import render_properties, streams_properties

    common: dict[str, Any] = {
        "bootstrap": "127.0.0.1:9092",
        "app_id": "peers-kstreams-x",
        "instance": 1,
        "state_dir": tmp_path / "state-1",
        "source": "in",
        "sink": "out",
        "commit_ms": 1000,
        "linger_ms": 1.0,
    }
    fast = streams_properties(session="fast", **common)
    default = streams_properties(session="default", **common)
    assert fast["consumer.session.timeout.ms"] == "6000"
    assert "consumer.session.timeout.ms" not in default
    assert fast["num.standby.replicas"] == "1"
    assert fast["processing.guarantee"] == "at_least_once"
    assert fast["client.id"] == "peers-kstreams-x-1"
    text = render_properties({"bootstrap.servers": "127.0.0.1:9092", "a": "b=c"})
    assert text == "bootstrap.servers=127.0.0.1\\:9092\na=b\\=c\n"


def test_the_arfl_spec_keeps_seq_and_schedules_the_fault_at_the_same_input_moment() -> None:
    from peer_arfl import arfl_spec
    from peer_systems import Load

    load = Load(1000, 160.0, 2, 100, 1, 115.0, 65.0, 30.0)
    active = arfl_spec("active", load, "kill-replica")
    assert active.replication.mode == "active" and active.replication.replicas == 2
    assert active.replication.trigger == "realtime"
    raw = json.loads(active.model_dump_json(by_alias=True, exclude_none=True))
    assert {"select": ["seq", "user", "amount", "ts"]} in raw["steps"]
    assert [(c["fault"], c["at"]) for c in raw["chaos"]] == [("kill-replica", "115s")]
    passive = arfl_spec("passive", load, None)
    assert (passive.replication.mode, passive.replication.replicas) == ("passive", 1)
    assert not passive.chaos


def test_an_earlier_out_is_analysed_again_from_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import peers
    from peer_probe import HEADER
    from peer_sampler import Point
    from peer_systems import save_points

    samples = _run(stall=(20.0, 23.5))
    csv = tmp_path / "probe.csv"
    csv.write_text(HEADER + "\n" + "".join(f"{s[0]},{s[1]},{s[2]},\n" for s in samples))
    t0 = T0 / 1000
    points = [
        Point(t0 + t, {"taskmanager": 0.5 * t, "probe": 0.1 * t}, {"taskmanager": 2**29})
        for t in range(0, 41, 5)
    ]
    save_points(tmp_path / "cpu.json", points)
    row = {
        "system": "flink alo",
        "fault": "kill-taskmanager",
        "rate": 100,
        "duration_s": 40.0,
        "warmup_s": 5.0,
        "window_s": 10.0,
        "seed": 1,
        "keys": 100,
        "filters": False,
        "t0_ms": T0,
        "fault_s": 20.0,
        "probe_csv": str(csv),
        "cpu_json": str(tmp_path / "cpu.json"),
    }
    out = tmp_path / "peers.json"
    out.write_text(json.dumps([row, {"system": "kstreams", "error": "PeerError: no mvn"}]))
    assert peers.main(["--from", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("| flink alo | kill-taskmanager | 5.00 | 5.00 | 5.00 |")
    # 0.5 core of the TaskManager for 40 s; the probe is not the system's.
    assert lines[2].endswith("| 0 | 0 | 20.0 | 0.50 | 512 |")
    assert lines[3].startswith("| kstreams | none | failed: PeerError: no mvn |")
