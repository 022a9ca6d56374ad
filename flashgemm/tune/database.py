"""The committed tuning databases: flashgemm/databases/<target>/<workload>.<dtype>/.

Each workload directory holds
    database_workload.json, database_tuning_record.json   Meta-Schedule JSONDatabase, top-k records only
    provenance.json                                       what was tuned, where, how, and how it went; the sha256
                                                          of the two database files it was written with
    curve.csv, curve.png                                  best time found vs trials of the search in work/
    work/                                                 (git-ignored) every measured record, for resuming

No data is lost silently:
- Reading never writes (open_json_db(create=False)): files are checked and read from a private copy.
- The only line ever dropped is a torn final one (no newline at its end, not JSON: a write cut by a kill), and
  dropping it is said. It is cut off in place only in a work directory, which its tuner appends to. Any other
  unreadable line (a merge-conflict marker, a line that is not JSON) is a DatabaseError naming file, line and fix.
- write_top_k writes the three files into a temporary directory, fsyncs them and renames them into place,
  provenance.json first. Its sha256 of the two database files makes any mix of old and new files (a write cut
  between two renames, a hand edit) a DatabaseError for readers. A provenance.json written before these digests
  has none, and its database is read as it is.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence

import tvm
from tvm.s_tir import meta_schedule as ms

INVALID_SECS = 1e9  # Meta-Schedule stores failed candidates with a huge run time (1e10 s)
PROVENANCE = "provenance.json"
DB_FILES = ("database_workload.json", "database_tuning_record.json")
DIGESTS = "database_sha256"  # in provenance.json: {file name: sha256} of the DB_FILES it was written with


class DatabaseError(RuntimeError):
    """A database that is missing, unreadable, or for another target/workload."""


def default_root() -> Path:
    """The databases shipped with the package (flashgemm/databases): tuning writes there unless given --db."""
    return Path(__file__).resolve().parent.parent / "databases"


def workload_dir(root: os.PathLike, target: str, dir_name: str) -> Path:
    return Path(root) / target / dir_name


def mean_secs(record) -> Optional[float]:
    """A record's mean run time (a TuningRecord, or its run_secs list as stored in JSON); None when it failed."""
    secs = [float(x) for x in ((record if isinstance(record, list) else record.run_secs) or [])]
    if not secs:
        return None
    mean = sum(secs) / len(secs)
    return None if mean >= INVALID_SECS else mean


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


CONFLICT_MARKERS = (b"<<<<<<<", b"|||||||", b"=======", b">>>>>>>")


def _fix(path: Path, appending: bool, conflict: bool) -> str:
    """What to do about an unreadable line of `path`: a work directory (the tuner's own, appended to, git-ignored)
    is measured again; a committed database is restored from git (after a merge: one side's files, whole, as the
    record file's workload indices point into the workload file), or tuned again when it never was committed."""
    work = next((p for p in path.parents if p.name == "work"), None)
    if appending or work is not None:
        return f"delete {work or path.parent} and tune again"
    if conflict:
        return (f"resolve the conflict by keeping one side's database whole, e.g. git checkout --ours -- "
                f"{path.parent} (or --theirs)")
    return f"restore it with git checkout -- {path} (or delete {path.parent} and tune again)"


def checked_length(path: Path, data: bytes, appending: bool = False) -> int:
    """How many leading bytes of `data` (the contents of the JSON-lines file `path`) to keep: len(data), or less by a
    torn final line (no newline at its end and not JSON: a write cut by a kill). Any other unreadable line (a
    merge-conflict marker, a line that is not JSON, a blank one, a last line that ends in a newline but is not
    JSON) is a DatabaseError naming the file, the line and the fix: those are damage, not an interrupted append,
    and cutting the file there would drop every record after them without a word. appending: the file is the
    caller's own work file (the advice differs)."""
    *lines, tail = data.split(b"\n")  # (at newlines only, as TVM's reader splits; tail: after the last newline)
    for n, line in enumerate([*lines, tail] if tail else lines, start=1):
        conflict = line.startswith(CONFLICT_MARKERS)
        if conflict:
            why = f"a merge-conflict marker ({line[:7].decode()})"
        else:
            try:
                json.loads(line)
                continue
            except ValueError as err:
                if n > len(lines):  # the last line, without its newline: torn
                    return len(data) - len(tail)
                why = "a blank line" if not line.strip() else f"not JSON ({err.msg})"
        raise DatabaseError(f"{path}, line {n}: {why}; {_fix(path, appending, conflict)}")
    return len(data)


def repair_jsonl(path: Path, log: Optional[Callable[[str], None]] = None) -> int:
    """Cut a torn final line off `path` in place (a write cut by a kill) and end the file with a newline, saying so
    through `log` (default: stderr); returns the number of bytes dropped. Only for a file its caller appends to (a
    work directory): the next append would otherwise run into the torn line. Any other unreadable line raises
    DatabaseError (checked_length); the records before the torn line are never rewritten (the file is truncated,
    not written again)."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    keep = checked_length(path, data, appending=True)
    say = log or _say
    if keep < len(data):
        os.truncate(path, keep)
        kept = data.count(b"\n")  # (the torn line has none)
        say(f"[database] {path}: dropped a torn final line ({len(data) - keep} bytes, a write cut by a kill); the "
            f"{kept} lines before it are kept")
    elif data and not data.endswith(b"\n"):
        with path.open("ab") as fh:
            fh.write(b"\n")
        say(f"[database] {path}: added the missing newline at the end of its last line")
    return len(data) - keep


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _expected_digests(path: Path) -> Optional[dict]:
    """The database files' sha256 that path/provenance.json records (write_top_k), or None: no provenance (a work
    directory) or one written before the digests were (every such database is still read as it is)."""
    if not (path / PROVENANCE).exists():
        return None
    digests = read_provenance(path).get(DIGESTS)
    return digests if isinstance(digests, dict) else None


def _check_digests(path: Path, contents: dict) -> None:
    """DatabaseError unless the database files' bytes (`contents`: {file name: bytes or None when missing}) are the
    ones provenance.json was written with."""
    want = _expected_digests(path)
    if want is None:
        return
    for name in DB_FILES:
        data = contents[name]
        if data is None or _sha256(data) != want.get(name):
            state = "is missing" if data is None else "is not the file"
            raise DatabaseError(
                f"{path / name} {state} that {PROVENANCE} was written with (a write of the top-k files was cut "
                f"short, or a file was edited by hand): restore the three files with git checkout -- {path} (or "
                f"delete them and tune again; records in work/ are kept)")


def json_database(work_dir: Path, allow_missing: bool, files: Optional[tuple] = None) -> ms.database.JSONDatabase:
    """ms.database.JSONDatabase(work_dir=...), built through a plain FFI call instead of the class constructor.
    files: the two file paths, when they are not work_dir's DB_FILES.

    Why: opening the database replays every record's trace on TVM's worker threads, and a trace with rfactor of the
    online-softmax reducer (flashgemm/tvm_ext/online_softmax.py) calls back into Python from those threads. tvm-ffi
    releases the GIL during function calls but holds it during object constructors, so the constructor deadlocks (the
    two-sweep recompute form hung here). The function returns the same JSONDatabase object."""
    make = tvm.get_global_func("s_tir.meta_schedule.DatabaseJSONDatabase")
    workload, records = files or (Path(work_dir) / DB_FILES[0], Path(work_dir) / DB_FILES[1])
    return make(str(workload), str(records), allow_missing, "structural")


@contextlib.contextmanager
def readable_copy(path: Path, names: Sequence[str] = DB_FILES, log: Optional[Callable[[str], None]] = None):
    """The JSON-lines files `names` of directory `path`, checked and copied into a private temporary directory:
    yields their paths there. Nothing under `path` is written. A torn final line is left out of the copy, with a
    message through `log` (default: stderr); any other unreadable line raises DatabaseError (checked_length). The
    copy is exactly the bytes checked (and, where provenance.json records their sha256, verified), so a file
    replaced meanwhile cannot slip in unchecked. Missing files are left out (the caller says what that means)."""
    # the database files before provenance.json, which write_top_k renames first: a read racing a write gets a
    # whole set or a mismatch, never a mix that passes
    contents = {name: (path / name).read_bytes() if (path / name).exists() else None for name in names}
    keep = {name: checked_length(path / name, data) for name, data in contents.items() if data is not None}
    if tuple(names) == DB_FILES:
        _check_digests(path, contents)
    for name, n in keep.items():
        if n < len(contents[name]):
            (log or _say)(
                f"[database] {path / name}: read without its torn final line ({len(contents[name]) - n} bytes, a "
                f"write cut by a kill); the file is left as it is (tune again to rewrite it)")
    tmp = Path(tempfile.mkdtemp(prefix="flashgemm-db-"))
    try:
        out = []
        for name in names:
            if contents[name] is not None:
                (tmp / name).write_bytes(contents[name][:keep[name]])
            out.append(tmp / name)
        yield tuple(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def open_json_db(path: Path, create: bool = False,
                 log: Optional[Callable[[str], None]] = None) -> ms.database.JSONDatabase:
    """The Meta-Schedule JSONDatabase of directory `path`.

    create=False (reading: build, best-record selection, checks, a committed database a search starts from):
    nothing under `path` is written, ever. The files are checked and read from a private copy (readable_copy): a
    torn final line is left out with a message, any other unreadable line or a file that disagrees with the sha256
    in provenance.json is a DatabaseError. The database object holds every record in memory; what is committed to
    it goes to the removed copy, not to `path`.

    create=True: the caller's own work directory, which it appends to (flashgemm/databases/**/work/ and its shards):
    created when missing, and a torn final line is cut off in place, with a message (repair_jsonl); any other unreadable
    line is a DatabaseError."""
    if not create and not all((path / f).exists() for f in DB_FILES) and _expected_digests(path) is None:
        raise DatabaseError(f"no tuning database at {path} (expected {', '.join(DB_FILES)})")
    # Records of the two-sweep recompute form replay rfactor of the online-softmax reducer when the database is
    # opened; unregistered, TVM fails with an opaque "parallel_for_dynamic error" (any target: it is not CUDA's)
    from flashgemm.tvm_ext import online_softmax  # noqa: PLC0415
    online_softmax.register()
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
            for f in DB_FILES:
                repair_jsonl(path / f, log)
            return json_database(path, allow_missing=True)
        with readable_copy(path, DB_FILES, log) as files:
            return json_database(path, allow_missing=False, files=files)
    except DatabaseError:
        raise
    except Exception as err:  # noqa: BLE001  (TVM raises its own error types)
        reason = str(err).strip().splitlines()[-1]
        if "is not registered" in reason:  # a bug of ours, not of the database: say so
            raise DatabaseError(f"cannot read the tuning database at {path}: {reason} (register the target's "
                                f"tensor intrinsics first: flashgemm.spaces.intrinsics.register_intrinsics)") from err
        raise DatabaseError(f"corrupt tuning database at {path}: {reason}. "
                            f"Delete the directory and tune again.") from err


def read_provenance(wl_dir: Path) -> dict:
    path = wl_dir / PROVENANCE
    try:
        text = path.read_text(errors="replace")
        return json.loads(text)
    except FileNotFoundError:
        raise DatabaseError(f"{path} is missing: not a tuning database directory") from None
    except ValueError as err:
        if any(line.startswith(tuple(m.decode() for m in CONFLICT_MARKERS)) for line in text.splitlines()):
            raise DatabaseError(f"{path} holds a merge-conflict marker; resolve the conflict by keeping one side's "
                                f"database whole, e.g. git checkout --ours -- {wl_dir} (or --theirs)") from None
        raise DatabaseError(f"{path} is not valid JSON ({err}); delete {wl_dir} and tune again") from None


def check_target(wl_dir: Path, prov: dict, target: str) -> None:
    if prov.get("target") != target:
        raise DatabaseError(f"{wl_dir} holds records tuned for target {prov.get('target')!r}, not {target!r}. "
                            f"Tune for {target} (flashgemm-tune --target {target}) or point --db elsewhere.")


def top_records(mods, dbs, k: int) -> list:
    """The k fastest valid records for a module (or any of a list of modules: a workload's forms) across
    databases, one per distinct trace."""
    mods = [mods] if isinstance(mods, tvm.IRModule) else list(mods)
    seen, out = set(), []
    for db in dbs:
        for mod in mods:
            if not db.has_workload(mod):
                continue
            for rec in db.get_top_k(db.commit_workload(mod), max(k, 1) * 4):
                secs = mean_secs(rec)
                key = str(rec.trace)
                if secs is None or key in seen:
                    continue
                seen.add(key)
                out.append((secs, rec))
    out.sort(key=lambda t: t[0])
    return [rec for _, rec in out[:k]]


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_top_k(wl_dir: Path, mod: tvm.IRModule, records: list, provenance: dict) -> None:
    """Replace wl_dir's database files and provenance with `records` (already top-k) and `provenance` (to which
    the files' sha256 are added, DIGESTS); mod: the workload's primary module.

    Atomic as a set for readers: the files are written and fsynced in a temporary directory, then renamed into
    place, provenance.json first. Each rename is atomic, and from the first one on provenance.json names the new
    database files' sha256: a run killed between two renames leaves a set that readers refuse (open_json_db), never
    one they take for whole. (Provenance last would leave such a mix unnoticed wherever the provenance replaced
    predates the digests.) The directory is fsynced last, so the renames outlive a crash."""
    wl_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=wl_dir))
    try:
        db = json_database(tmp, allow_missing=True)
        db.commit_workload(mod)  # the primary form's, even when a record of another form is the fastest
        for rec in records:  # each record under its own form's workload
            db.commit_tuning_record(ms.database.TuningRecord(
                rec.trace, db.commit_workload(rec.workload.mod), rec.run_secs, rec.target, rec.args_info))
        digests = {f: _sha256((tmp / f).read_bytes()) for f in DB_FILES}
        (tmp / PROVENANCE).write_text(json.dumps({**provenance, DIGESTS: digests}, indent=1) + "\n")
        for f in (PROVENANCE, *DB_FILES):
            _fsync(tmp / f)
        for f in (PROVENANCE, *DB_FILES):  # provenance first: see the docstring
            os.replace(tmp / f, wl_dir / f)
        with contextlib.suppress(OSError):  # (a file system that cannot fsync a directory: the renames stand)
            _fsync(wl_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
