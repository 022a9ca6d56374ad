"""flashgemm/tune/database.py never loses data silently: only a torn final line (a write cut by a kill) is dropped, and
that is said; reading never writes; any other unreadable line is an error naming file and line; the top-k files
are replaced as a set (a write cut between two renames is refused by readers, never read as a mix). CPU only."""
import os
import re
import shutil
from pathlib import Path

import pytest

from flashgemm.tune import database as dbm
from flashgemm.tune import ms_default as md
from flashgemm.spaces.intrinsics import register_intrinsics

REPO = Path(__file__).resolve().parent.parent
LLVM_DB = REPO / "tests" / "data" / "llvm-slow-export" / "llvm" / "demo.f16"  # one record, no sha256 (older)
RECORDS = dbm.DB_FILES[1]
TORN = b'[0, [[["GetSBlock", [], ["S", "ma'  # a record's first bytes: a write cut by kill -9


def snapshot(*dirs: Path) -> dict:
    """Every file under `dirs`: its bytes and mtime (a rewrite with the same bytes changes the mtime)."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for d in dirs for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def llvm_db(tmp_path) -> Path:
    """A copy of a committed database (written before provenance.json named its files' sha256)."""
    wl_dir = tmp_path / "llvm" / LLVM_DB.name
    shutil.copytree(LLVM_DB, wl_dir)
    assert dbm.DIGESTS not in dbm.read_provenance(wl_dir)
    return wl_dir


@pytest.fixture
def work_dir(llvm_db) -> Path:
    """A tuner's work directory (git-ignored, appended to) holding the database's records."""
    work = llvm_db / "work"
    work.mkdir()
    for f in dbm.DB_FILES:
        shutil.copy(llvm_db / f, work / f)
    return work


def record_line(wl_dir: Path) -> bytes:
    (line,) = (wl_dir / RECORDS).read_bytes().splitlines(keepends=True)
    return line


def test_a_torn_final_line_in_a_work_directory_is_cut_off_in_place_and_said(work_dir):
    whole = (work_dir / RECORDS).read_bytes()
    with (work_dir / RECORDS).open("ab") as fh:
        fh.write(TORN)
    said = []
    db = dbm.open_json_db(work_dir, create=True, log=said.append)
    assert len(db.get_all_tuning_records()) == 1
    assert (work_dir / RECORDS).read_bytes() == whole  # cut off, so that the next append starts a line
    (msg,) = said
    assert str(work_dir / RECORDS) in msg and f"torn final line ({len(TORN)} bytes" in msg
    # the tuner's ledger in work/ likewise
    (work_dir / "runs.jsonl").write_bytes(b'{"trials": 2}\n{"tri')
    from flashgemm.tune import provenance
    provenance.append_ledger(work_dir, {"trials": 3})
    assert [r["trials"] for r in provenance.read_ledger(work_dir)] == [2, 3]


def test_a_torn_final_line_in_a_database_opened_for_reading_is_read_without_writing(llvm_db):
    with (llvm_db / RECORDS).open("ab") as fh:
        fh.write(record_line(llvm_db) + TORN)
    before = snapshot(llvm_db)
    said = []
    db = dbm.open_json_db(llvm_db, log=said.append)
    assert len(db.get_all_tuning_records()) == 2  # the two whole lines
    assert snapshot(llvm_db) == before
    (msg,) = said
    assert str(llvm_db / RECORDS) in msg and f"({len(TORN)} bytes" in msg and "left as it is" in msg
    # through flashgemm.bundle.best, which flashgemm-build reads with: nothing written either (the message goes to
    # stderr)
    from flashgemm.bundle import best
    assert best.load_tuned(llvm_db, "llvm").run_secs > 0
    assert snapshot(llvm_db) == before


@pytest.mark.parametrize("create", [False, True], ids=["reading", "work directory"])
@pytest.mark.parametrize("bad, line, what", [
    (b"<<<<<<< HEAD\n", 2, "a merge-conflict marker (<<<<<<<)"),
    (b"=======\n", 2, "a merge-conflict marker (=======)"),
    (b'{"not json\n', 2, "not JSON"),
    (b"\n", 2, "a blank line"),  # (TVM's reader crashes on one)
])
def test_an_unreadable_line_before_the_last_is_an_error_naming_file_and_line(llvm_db, work_dir, create, bad, line,
                                                                            what):
    where = work_dir if create else llvm_db
    rec = record_line(where)
    (where / RECORDS).write_bytes(rec + bad + rec)
    before = snapshot(llvm_db)
    with pytest.raises(dbm.DatabaseError) as err:
        dbm.open_json_db(where, create=create)
    assert f"{where / RECORDS}, line {line}: {what}" in str(err.value)
    assert snapshot(llvm_db) == before  # nothing cut: the record after it is still there
    fix = (f"delete {work_dir} and tune again" if create else f"git checkout --ours -- {llvm_db}" if "marker" in what
           else f"restore it with git checkout -- {llvm_db / RECORDS}")
    assert fix in str(err.value)


def test_a_last_line_that_ends_in_a_newline_but_is_not_json_is_an_error(llvm_db, work_dir):
    rec = record_line(llvm_db)
    for where in (llvm_db, work_dir):
        (where / RECORDS).write_bytes(rec + b'{"cut":\n')
        with pytest.raises(dbm.DatabaseError, match=r"database_tuning_record\.json, line 2: not JSON"):
            dbm.open_json_db(where, create=where == work_dir)
        assert (where / RECORDS).read_bytes().endswith(b'{"cut":\n')
    from flashgemm.tune import provenance
    (work_dir / "runs.jsonl").write_bytes(b'{"trials": \n{"trials": 2}\n')  # the tuner's ledger in work/
    with pytest.raises(dbm.DatabaseError, match=rf"runs\.jsonl, line 1: not JSON .*delete {re.escape(str(work_dir))} "
                                                rf"and tune again"):
        provenance.read_ledger(work_dir)


def test_a_conflict_in_provenance_names_the_conflict(llvm_db):
    text = (llvm_db / dbm.PROVENANCE).read_text()
    (llvm_db / dbm.PROVENANCE).write_text(f"<<<<<<< HEAD\n{text}=======\n{text}>>>>>>> theirs\n")
    with pytest.raises(dbm.DatabaseError, match="holds a merge-conflict marker; resolve the conflict"):
        dbm.read_provenance(llvm_db)


def test_committed_databases_are_byte_identical_after_a_build_style_read():
    from flashgemm import targets
    register_intrinsics("sm_90")
    dirs = sorted(d for d in (REPO / "flashgemm" / "databases" / "sm_90").iterdir() if (d / dbm.PROVENANCE).exists())
    dirs += sorted(p.parent for p in (REPO / "tests" / "data").glob("*/*/*/" + dbm.PROVENANCE))
    ms_dirs = sorted(p.parent for p in (REPO / "flashgemm" / "databases" / "ms_default").glob("*/*/" + md.META))
    assert len(dirs) >= 20 and LLVM_DB in dirs and ms_dirs
    before = snapshot(*dirs, *ms_dirs)
    for wl_dir in dirs:  # what best.load_tuned does before it replays the best record
        dbm.check_target(wl_dir, dbm.read_provenance(wl_dir), wl_dir.parent.name)
        db = dbm.open_json_db(wl_dir)
        assert dbm.top_records([r.workload.mod for r in db.get_all_tuning_records()], [db], 1), wl_dir
    for ms_dir in ms_dirs:
        assert md._open_db(ms_dir, create=False).get_all_tuning_records()
    assert snapshot(*dirs, *ms_dirs) == before


def _set_of(wl_dir: Path) -> tuple:
    return tuple((wl_dir / f).read_bytes() for f in (*dbm.DB_FILES, dbm.PROVENANCE))


def _top_k(src: Path, wl_dir: Path, secs: float, note: str, other_workload: bool = False) -> None:
    """write_top_k of src's records, timed at `secs`; other_workload: with one more workload (a placeholder module
    as the primary one), so that the workload file differs too."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    recs = [ms.database.TuningRecord(r.trace, r.workload, [secs], r.target, r.args_info)
            for r in dbm.open_json_db(src).get_all_tuning_records()]
    mod = tvm.IRModule({"main": tvm.tirx.PrimFunc([], tvm.tirx.Evaluate(0))}) if other_workload else \
        recs[0].workload.mod
    dbm.write_top_k(wl_dir, mod, recs, dict(dbm.read_provenance(src), note=note))


def test_the_top_k_files_record_their_sha256_and_a_hand_edit_is_refused(llvm_db, tmp_path):
    wl_dir = tmp_path / "new"
    _top_k(llvm_db, wl_dir, 1e-3, "new")
    prov = dbm.read_provenance(wl_dir)
    assert set(prov[dbm.DIGESTS]) == set(dbm.DB_FILES) and prov["note"] == "new"
    assert len(dbm.open_json_db(wl_dir).get_all_tuning_records()) == 1
    assert not [p for p in wl_dir.iterdir() if p.name.startswith(".tmp")]
    with (wl_dir / RECORDS).open("ab") as fh:  # a torn line here was not written by write_top_k: refused too
        fh.write(TORN)
    with pytest.raises(dbm.DatabaseError, match=f"{re.escape(str(wl_dir / RECORDS))} is not the file that "
                                                f"provenance.json was written with .*git checkout -- "
                                                f"{re.escape(str(wl_dir))}"):
        dbm.open_json_db(wl_dir)


@pytest.mark.parametrize("cut_after", [0, 1, 2, 3])
@pytest.mark.parametrize("old", ["older", "sha256"])
def test_a_top_k_write_cut_between_renames_is_never_read_as_a_mixed_set(llvm_db, tmp_path, monkeypatch, cut_after,
                                                                        old):
    """A run killed between the renames of write_top_k (simulated: os.replace fails after `cut_after` of the three
    files) leaves the old set, the new one, or a mix that readers refuse; never a mix read as one database. old:
    the set replaced was written before the sha256 were recorded, or with them. Old and new differ in each file."""
    wl_dir = tmp_path / "db"
    if old == "older":
        shutil.copytree(llvm_db, wl_dir)
    else:
        _top_k(llvm_db, wl_dir, 1e-3, "old")
    old_set, old_secs = _set_of(wl_dir), [dbm.mean_secs(r) for r in dbm.open_json_db(wl_dir).get_all_tuning_records()]
    _top_k(llvm_db, tmp_path / "whole", 2e-3, "new", other_workload=True)
    new_set = _set_of(tmp_path / "whole")
    assert all(a != b for a, b in zip(old_set, new_set))
    replace, done = os.replace, []

    class Killed(BaseException):
        pass

    def cut(src, dst):
        if len(done) == cut_after:
            raise Killed
        done.append(dst)
        replace(src, dst)

    monkeypatch.setattr(os, "replace", cut)
    if cut_after < 3:
        with pytest.raises(Killed):
            _top_k(llvm_db, wl_dir, 2e-3, "new", other_workload=True)
    else:
        _top_k(llvm_db, wl_dir, 2e-3, "new", other_workload=True)
    monkeypatch.setattr(os, "replace", replace)
    assert not [p for p in wl_dir.iterdir() if p.name.startswith(".tmp")]
    on_disk = _set_of(wl_dir)
    assert cut_after != 0 or on_disk == old_set  # nothing renamed
    assert cut_after != 3 or on_disk == new_set  # all renamed
    if on_disk in (old_set, new_set):  # a whole set: read as it is
        secs = [dbm.mean_secs(r) for r in dbm.open_json_db(wl_dir).get_all_tuning_records()]
        assert secs == ([2e-3] if on_disk == new_set else old_secs)
        return
    with pytest.raises(dbm.DatabaseError, match=f"is not the file that provenance.json was written with .*"
                                                f"git checkout -- {re.escape(str(wl_dir))}"):
        dbm.open_json_db(wl_dir)
