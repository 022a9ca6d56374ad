"""Twin verdicts (flashgemm/bundle/twins.py, flashgemm-twin-verdicts): a GPU benchmark that timed a workload's
fixed-batch twin and its plain any-batch kernel decides whether flashgemm-build ships the twin. CPU only: the benchmark
is given."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashgemm.bundle import best, twins
from flashgemm.tune import database

REPO = Path(__file__).resolve().parent.parent
WORKLOAD = "k1.f16"  # a small committed sm_90 database with an any-batch kernel and its twin


def _row(name, twin_us, plain_us, kernel="tuned ({}, fixed-batch twin, 9.0 us when tuned)"):
    return {"workload": name, "ours_kernel": kernel.format(name), "ours": {"median_us": twin_us},
            "ours_tuned_any_batch": {"median_us": plain_us} if plain_us else "n/a"}


def _result(*rows):
    return {"target": "sm_90", "date": "2026-11-26T00:00:00+00:00",
            "env": {"gpu": "NVIDIA H200", "driver": "580.159.04"}, "rows": list(rows)}


def test_verdicts_leave_out_only_a_clearly_slower_twin():
    found = twins.verdicts(_result(_row("a.f16", 115.0, 105.8), _row("b.f16", 100.0, 99.0), _row("c.f16", 9.1, 9.4),
                                   _row("d.f16", 40.4, None),  # no plain kernel timed: no verdict
                                   _row("e.f16", 50.0, 60.0, kernel="tuned ({}, 9.0 us when tuned)")),  # no twin
                           "bench.json")
    assert {k: v["ship"] for k, v in found.items()} == {"a.f16": False, "b.f16": True, "c.f16": True}
    assert found["a.f16"]["gpu"] == "NVIDIA H200" and found["a.f16"]["source"] == "bench.json"


def test_a_verdict_holds_for_its_record_only():
    assert twins.ships_twin({"best_secs": 1e-4})  # no verdict: ship
    assert not twins.ships_twin({"best_secs": 1e-4, "twin": {"ship": False, "best_secs": 1e-4}})
    assert twins.ships_twin({"best_secs": 9e-5, "twin": {"ship": False, "best_secs": 1e-4}})  # retuned since


@pytest.fixture()
def db(tmp_path):
    shutil.copytree(REPO / "flashgemm" / "databases" / "sm_90" / WORKLOAD, tmp_path / "sm_90" / WORKLOAD)
    prov = database.read_provenance(tmp_path / "sm_90" / WORKLOAD)
    prov.pop("twin", None)
    (tmp_path / "sm_90" / WORKLOAD / database.PROVENANCE).write_text(json.dumps(prov))
    return tmp_path


def test_build_leaves_out_the_twin_a_benchmark_found_slower(db, tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_result(_row(WORKLOAD, 10.0, 9.0), _row("not-here.f16", 5.0, 6.0))))
    out = subprocess.run([sys.executable, "-m", "flashgemm.cli.twin_verdicts", str(bench), "--db", str(db)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"{WORKLOAD}: twin 10.0 us, any-batch 9.0 us (1.111x): left out" in out.stdout
    assert "not-here.f16: no database" in out.stdout
    verdict = database.read_provenance(db / "sm_90" / WORKLOAD)["twin"]
    assert verdict["ship"] is False and verdict["source"] == "bench.json"
    logs = []
    (tk,) = best.load_all("sm_90", db, log=logs.append, transfer_from=None)
    assert tk.any_batch and tk.twin is None and tk.fixed_batch is None
    assert any("fixed-batch twin left out: slower than the plain kernel in bench.json" in m for m in logs), logs
    # a verdict for the twin (or none) keeps it
    twins.record(db, "sm_90", twins.verdicts(_result(_row(WORKLOAD, 9.0, 9.1)), "b2.json"), log=lambda *_: None)
    (tk,) = best.load_all("sm_90", db, log=lambda *_: None, transfer_from=None)
    assert tk.twin is not None and tk.fixed_batch is not None


def test_twin_verdicts_refuses_what_is_not_a_whole_benchmark(db, tmp_path):
    cut = tmp_path / "partial.json"
    cut.write_text(json.dumps({**_result(_row(WORKLOAD, 10.0, 9.0)), "partial": True}))
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]")
    for path, why in ((cut, "a partial bench result"), (junk, "not a benchmarks.bench result"),
                      (tmp_path / "missing.json", "not a readable benchmarks.bench result")):
        out = subprocess.run([sys.executable, "-m", "flashgemm.cli.twin_verdicts", str(path), "--db", str(db)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 2 and why in out.stderr, out.stderr
    assert "twin" not in database.read_provenance(db / "sm_90" / WORKLOAD)
