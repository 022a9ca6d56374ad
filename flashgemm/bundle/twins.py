"""Whether a workload's bundle ships its fixed-batch twin: a verdict from a benchmark, kept in its provenance.

A twin (TunedKernel.twin: the best record with one batch dim static) is usually as fast or faster than the plain
any-batch kernel, but not always: on the H200 the BERT-Large padding-mask site's twin (B1 = 16 static) is slower
than its plain kernel. Which is faster is only known by timing both, which
`python -m benchmarks.bench --also tuned_any_batch` does on the GPU; flashgemm-build runs anywhere. So
`flashgemm-twin-verdicts BENCH.json` turns such a benchmark into a verdict per workload, written into the workload's
provenance.json:

    "twin": {"ship": false, "twin_us": 115.0, "any_batch_us": 105.8, "best_secs": <the record's>, "gpu": ...,
             "driver": ..., "date": ..., "source": "bench-suite-float16.json"}

and best.load_tuned leaves the twin out where "ship" is false. A verdict is about one record: it is ignored once
the database's best record changes (best_secs differs), and flashgemm-tune writes a fresh provenance without it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Optional

from flashgemm.tune import database as dbm

# the twin is left out only when it is this much slower (run-to-run spread of one bench is ~1-2 %)
SLOWER_LIMIT = 0.03
TWIN_TAG = "fixed-batch twin"


def ships_twin(prov: dict) -> bool:
    """False only when a verdict for the database's current best record says the twin is slower."""
    verdict = prov.get("twin")
    if not isinstance(verdict, dict) or verdict.get("best_secs") != prov.get("best_secs"):
        return True
    return bool(verdict.get("ship", True))


def verdicts(result: dict, source: str, slower_limit: float = SLOWER_LIMIT) -> dict:
    """{workload dir name: verdict} from a python -m benchmarks.bench result that timed the twin ("ours", served by
    the twin) and the plain kernel ("ours_tuned_any_batch") of tuned workloads; rows without both are skipped."""
    env = result.get("env", {})
    out = {}
    for row in result.get("rows", []):
        twin, plain = row.get("ours"), row.get("ours_tuned_any_batch")
        if TWIN_TAG not in str(row.get("ours_kernel", "")) or not isinstance(twin, dict) or not isinstance(plain, dict):
            continue
        t, p = twin.get("median_us"), plain.get("median_us")
        if not t or not p:
            continue
        out[row["workload"]] = {"ship": t <= p * (1 + slower_limit), "twin_us": t, "any_batch_us": p,
                                "gpu": env.get("gpu"), "driver": env.get("driver"), "date": result.get("date"),
                                "source": source}
    return out


def record(db_root: os.PathLike, target: str, found: dict, log: Callable = print) -> list:
    """Write each verdict into its workload's provenance (with the record it is about: the database's best_secs);
    returns the workload names written. A workload without a database here is reported and skipped."""
    written = []
    for name, verdict in sorted(found.items()):
        wl_dir = dbm.workload_dir(db_root, target, name)
        if not (wl_dir / dbm.PROVENANCE).exists():
            log(f"[twins] {name}: no database under {wl_dir.parent}: skipped")
            continue
        prov = dbm.read_provenance(wl_dir)
        prov["twin"] = {**verdict, "best_secs": prov.get("best_secs")}
        tmp = wl_dir / (dbm.PROVENANCE + ".tmp")
        tmp.write_text(json.dumps(prov, indent=1) + "\n")
        os.replace(tmp, wl_dir / dbm.PROVENANCE)
        ratio = verdict["twin_us"] / verdict["any_batch_us"]
        log(f"[twins] {name}: twin {verdict['twin_us']:.1f} us, any-batch {verdict['any_batch_us']:.1f} us "
            f"({ratio:.3f}x): {'ships' if verdict['ship'] else 'left out'}")
        written.append(name)
    return written


def load_result(path: os.PathLike) -> dict:
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise dbm.DatabaseError(f"{path}: not a readable benchmarks.bench result: {err} (give the JSON that python -m benchmarks.bench "
                                f"--also tuned_any_batch --out wrote)") from None
    if not isinstance(result, dict) or "rows" not in result or "target" not in result:
        raise dbm.DatabaseError(f"{path}: not a benchmarks.bench result, no rows and target (write one with python -m benchmarks.bench "
                                f"--also tuned_any_batch --out FILE.json)")
    if result.get("partial"):
        raise dbm.DatabaseError(f"{path}: a partial bench result, its run was cut short (use a complete one)")
    return result


def apply(paths: list, db_root: Optional[os.PathLike] = None, slower_limit: float = SLOWER_LIMIT,
          log: Callable = print) -> list:
    """Verdicts from every bench result in `paths`, recorded under db_root (default: the committed
    flashgemm/databases)."""
    written = []
    for path in paths:
        result = load_result(path)
        found = verdicts(result, Path(path).name, slower_limit)
        if not found:
            log(f"[twins] {path}: no row times both a twin and its plain kernel (python -m benchmarks.bench --also tuned_any_batch)")
        written += record(db_root or dbm.default_root(), result["target"], found, log)
    return written
