"""Which committed checkpoint is freshest, and a copy of one up to its last committed batch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from arfl.orchestrate import checkpoints
from arfl.orchestrate.checkpoints import Committed

CONF = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}


def _batch(loc: Path, batch: int, ends: dict[str, int], commit: bool = True) -> None:
    for log in ("offsets", "commits"):
        (loc / log).mkdir(parents=True, exist_ok=True)
    (loc / "offsets" / str(batch)).write_text(
        f"v1\n{json.dumps(CONF)}\n{json.dumps({'in': ends})}", encoding="utf-8"
    )
    (loc / "offsets" / f".{batch}.crc").write_bytes(b"crc")
    if commit:
        (loc / "commits" / str(batch)).write_text('v2\n{"nextBatchWatermarkMs":0}')
        (loc / "commits" / f".{batch}.crc").write_bytes(b"crc")


def _checkpoint(loc: Path, query: str, ends: list[dict[str, int]], running: bool) -> Path:
    """Batches 0..n-1 committed; with ``running``, batch n's offsets written but not committed
    (a boundary in progress), an unfinished log write and a state file of that batch."""
    loc.mkdir(parents=True)
    (loc / "metadata").write_text(json.dumps({"id": query}))
    (loc / "sources" / "0").mkdir(parents=True)
    (loc / "sources" / "0" / "0").write_text("v1\n{}")
    state = loc / "state" / "0" / "0"
    state.mkdir(parents=True)
    for i, e in enumerate(ends):
        _batch(loc, i, e)
        (state / f"{i + 1}_u{i}.changelog").write_text(f"v{i + 1}")
    if running:
        n = len(ends)
        _batch(loc, n, {p: o + 100 for p, o in ends[-1].items()}, commit=False)
        (loc / "commits" / f".{n}.0f3c.tmp").write_text("half")
        (state / f"{n + 1}_u{n}.changelog").write_text("next")
    return loc


def test_the_last_committed_batch_and_its_end_offsets(tmp_path: Path) -> None:
    loc = _checkpoint(tmp_path / "r0", "q0", [{"0": 5, "1": 7}, {"0": 9, "1": 12}], True)
    got = checkpoints.last_committed(loc)
    # Batch 2's offsets were written but it was not committed: batch 1 is the last.
    assert got == Committed(loc, 1, {"in": {"0": 9, "1": 12}}) and got.records == 21
    assert checkpoints.last_committed(tmp_path / "missing") is None
    empty = tmp_path / "empty"
    (empty / "commits").mkdir(parents=True)
    assert checkpoints.last_committed(empty) is None


def test_an_unreadable_offsets_entry_falls_back_to_the_batch_before(tmp_path: Path) -> None:
    loc = _checkpoint(tmp_path / "r0", "q0", [{"0": 5}, {"0": 9}], False)
    (loc / "offsets" / "1").write_text("v1\n{}\nnot json")
    assert checkpoints.last_committed(loc) == Committed(loc, 0, {"in": {"0": 5}})


def test_the_freshest_checkpoint_read_furthest(tmp_path: Path) -> None:
    a = _checkpoint(tmp_path / "a", "qa", [{"0": 5, "1": 7}], False)
    b = _checkpoint(tmp_path / "b", "qb", [{"0": 4, "1": 6}, {"0": 8, "1": 9}], False)
    c = _checkpoint(tmp_path / "c", "qc", [{"0": 8, "1": 9}], False)
    other = tmp_path / "other"
    _batch(other, 0, {"0": 100, "1": 100, "2": 100})  # other partitions: never chosen
    none = tmp_path / "none"
    last = checkpoints.last_committed
    best = checkpoints.freshest([last(none), last(a), last(other), last(b), last(c)])
    assert best is not None and best.path == b and best.batch == 1  # first of equals
    assert checkpoints.freshest([last(a)]) == last(a)
    assert checkpoints.freshest([last(none)]) is None


def test_a_copy_stops_at_the_last_committed_batch_and_keeps_its_own_query_id(
    tmp_path: Path,
) -> None:
    peer = _checkpoint(tmp_path / "peer", "q-peer", [{"0": 5}, {"0": 9}], True)
    own = _checkpoint(tmp_path / "own", "q-own", [{"0": 4}], False)
    committed = checkpoints.last_committed(peer)
    assert committed is not None
    dest = tmp_path / "copy"
    files = checkpoints.copy_committed(committed, dest, metadata_from=own)
    names = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}
    # Batches 0 and 1 of both logs with their checksums; nothing of batch 2 in the logs.
    for log in ("offsets", "commits"):
        assert {n for n in names if n.startswith(log)} == {
            f"{log}/0",
            f"{log}/.0.crc",
            f"{log}/1",
            f"{log}/.1.crc",
        }
    # The state files up to version 2 (batch 1's), not the peer's version 3 of its batch in
    # progress (format v1 names would clash with the replica's own version 3 later).
    assert {n for n in names if n.startswith("state/")} == {
        "state/0/0/1_u0.changelog",
        "state/0/0/2_u1.changelog",
    }
    assert "sources/0/0" in names and files == len(names)
    assert json.loads((dest / "metadata").read_text()) == {"id": "q-own"}
    assert checkpoints.last_committed(dest) == Committed(dest, 1, {"in": {"0": 9}})
    # The peer's own directory is untouched.
    assert (peer / "offsets" / "2").exists()
    with pytest.raises(FileExistsError):
        checkpoints.copy_committed(committed, dest)


def test_batch_ids_and_state_versions_are_read_from_every_kind_of_file_name() -> None:
    v = checkpoints._number
    # Log entries and their checksums.
    assert [v("3"), v(".3.crc"), v("12"), v("3x"), v(".3x.crc")] == [3, 3, 12, None, None]
    # State store files of every format.
    got = [v(n) for n in ("3.delta", ".3.delta.crc", "12.snapshot", "7_ab.changelog", "7.zip")]
    assert got == [3, 3, 12, 7, 7]
    assert [v(n) for n in ("._7_x.zip.crc", "schema", ".schema.crc", "x7.delta")] == [None] * 4
    beyond = checkpoints._beyond
    assert beyond(Path("offsets/.4.crc"), 3) and beyond(Path("commits/4"), 3)
    assert not beyond(Path("commits/3"), 3)
    assert not beyond(Path("state/0/0/4.delta"), 3)  # not a log entry
    assert checkpoints._unfinished(".4.0f3c.tmp") and checkpoints._unfinished("..4.0f3c.tmp.crc")
    new = checkpoints._newer_state
    assert new(Path("state/0/1/5.delta"), 3) and not new(Path("state/0/1/4.delta"), 3)
    # Not a partition's version file: the operator's metadata, RocksDB's SST files.
    assert not new(Path("state/0/_metadata/9"), 3)
    assert not new(Path("state/0/1/SST/9-abc.sst"), 3)


def test_a_copy_missing_a_state_file_its_commit_names_is_incomplete(tmp_path: Path) -> None:
    """Format v2: ``commits/N`` names the state files of version N + 1 by uuid; a copy without
    one of them cannot resume, and says so (the supervisor then keeps the replica's own)."""
    peer = _checkpoint(tmp_path / "peer", "q", [{"0": 5}, {"0": 9}], False)
    (peer / "commits" / "1").write_text(
        'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["u1"],["u9"]]}}'
    )
    committed = checkpoints.last_committed(peer)
    assert committed is not None
    with pytest.raises(checkpoints.IncompleteCopy, match=r"state/0/1: no state version 2 \(u9\)"):
        checkpoints.copy_committed(committed, tmp_path / "bad")
    (peer / "state" / "0" / "1").mkdir()
    (peer / "state" / "0" / "1" / "2_u9.changelog").write_text("v2")
    checkpoints.copy_committed(committed, tmp_path / "good")
    assert (tmp_path / "good" / "state" / "0" / "1" / "2_u9.changelog").exists()


def test_a_copy_keeps_no_query_id_when_the_replica_had_none(tmp_path: Path) -> None:
    peer = _checkpoint(tmp_path / "peer", "q-peer", [{"0": 5}], False)
    (peer / ".metadata.crc").write_bytes(b"crc")
    committed = checkpoints.last_committed(peer)
    assert committed is not None
    dest = tmp_path / "copy"
    checkpoints.copy_committed(committed, dest, metadata_from=tmp_path / "never-started")
    # Spark gives the query a new id rather than run two replicas under one.
    assert not (dest / "metadata").exists() and not (dest / ".metadata.crc").exists()


def test_a_file_deleted_while_copying_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    peer = _checkpoint(tmp_path / "peer", "q", [{"0": 5}, {"0": 9}], False)
    committed = checkpoints.last_committed(peer)
    assert committed is not None
    real = shutil.copy2

    def vanishing(src: Path, dst: Path) -> object:
        if Path(src).name == "1_u0.changelog":  # the state store's maintenance deleted it
            raise FileNotFoundError(src)
        return real(src, dst)

    monkeypatch.setattr(shutil, "copy2", vanishing)
    checkpoints.copy_committed(committed, tmp_path / "copy")
    assert not (tmp_path / "copy" / "state" / "0" / "0" / "1_u0.changelog").exists()
    assert (tmp_path / "copy" / "state" / "0" / "0" / "2_u1.changelog").exists()
    assert json.loads((tmp_path / "copy" / "metadata").read_text()) == {"id": "q"}
