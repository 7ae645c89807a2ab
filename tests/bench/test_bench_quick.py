"""``python -m bench --quick`` runs every benchmark end to end and writes well-formed results."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS, merge
from bench.harness import FIELDS, meets, record
from bench.scaling import QUICK as SCALING_QUICK

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_writes_every_benchmark_with_the_schema(tmp_path):
    out = tmp_path / "results.json"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(out.read_text())
    names = [r["name"] for r in records]
    assert len(names) == len(set(names))
    for bench in BENCHMARKS:  # every benchmark contributed
        prefix = "face_geom." if bench == "face_backend" else f"{bench}."
        assert any(n.startswith(prefix) for n in names), bench
    for r in records:
        assert set(FIELDS) <= set(r), r
        assert isinstance(r["value"], float) and math.isfinite(r["value"]), r
        if r["baseline_value"] is not None:
            assert r["baseline"] and r["ratio"] == r["value"] / r["baseline_value"], r
        else:
            assert r["ratio"] is None, r
        assert (r["meets_goal"] is None) == (r["goal"] is None), r
        if r["goal"] is not None:
            assert isinstance(r["meets_goal"], bool), r
        assert r["machine"]["cores"] >= 1 and r["machine"]["packages"]["numpy"], r
    goals = {r["name"]: r["goal"] for r in records}
    assert goals["egemaps.store_vs_opensmile"] == ">= 0.9"
    assert (
        goals["loading.frames_cache_format"] == ">= 0.9"
    )  # the cache's format against its old layout
    assert goals["loading.vs_csv"] == ">= 20" and goals["windowing.vs_pandas_rolling"] == ">= 10"
    assert (
        goals["ablation.grid_seconds"] == "<= 180 s"
        and goals["ablation.peak_memory_pss"] == "<= 3 GB"
    )
    assert goals["ablation.worker_shared_memory"] == ">= 1"
    assert goals["video.face_path"] == ">= 0.5" and goals["video.landmark_error"] == "< 0.02 IOD"
    assert goals["video.face_found"] == ">= 1" and goals["scaling.marginal_cost"] == "<= 1.2"
    repeated = {r["name"]: r for r in records if "spread" in r}
    assert {
        "scaling.marginal_cost",
        "scaling.marginal_cost_cpu",
        f"scaling.ablation_{SCALING_QUICK['sizes'][0]}_sessions",
    } <= set(repeated)
    assert {"unseen.nested_vs_grid", "anchor.vs_ceiling"} <= set(goals)
    for r in repeated.values():  # the value is the median of the runs: inside their range
        # one quick round of the unseen pair and of the anchor's ratio to its ceiling
        rounds = 1 if r["name"].startswith(("unseen.", "anchor.vs_ceiling")) else 2
        assert r["repeats"] >= rounds and r["spread"][0] <= r["value"] <= r["spread"][1], r
    by_name = {
        r["name"]: r for r in records
    }  # the two phases of the quick ablation add up to its run
    phases = (
        by_name["ablation.grid_seconds"]["value"]
        + by_name["ablation.unseen_listener_seconds"]["value"]
    )
    assert by_name["ablation.unseen_listener_seconds"]["value"] > 0
    assert math.isclose(
        phases, by_name["ablation.wall_seconds"]["value"], rel_tol=2e-3
    )  # values keep 4 digits
    # the peak's sample: inside the run, its parent's share at most the whole
    assert 0 <= by_name["ablation.peak_memory_at_seconds"]["value"] <= phases
    assert (
        0
        < by_name["ablation.peak_memory_parent_at_peak"]["value"]
        <= (by_name["ablation.peak_memory_pss"]["value"])
    )
    # the whole-job anchor: the hand-written loop and the package give the same CCC (to 1e-6) on every
    # configuration but the trees', and on those too when the loop fits on the package's features
    assert (
        goals["anchor.vs_handwritten_loop"] == ">= 5"
        and by_name["anchor.vs_handwritten_loop"]["baseline_value"] > 0
    )
    for name in ("anchor.metric_difference", "anchor.tree_metric_difference_same_features"):
        assert goals[name] == "<= 1e-6 CCC" and by_name[name]["meets_goal"] is True, by_name[name]
    # the ceiling: the loop's run over its time in the trees, which any tool must fit the same way
    ceiling = by_name["anchor.ceiling"]
    assert ceiling["value"] > 1 and "gradient-boosting" in ceiling["baseline"], ceiling
    assert "loading.vs_csv" in proc.stdout and "ratio" in proc.stdout  # the table was printed


def test_goals_apply_to_the_ratio_or_to_the_value_in_its_unit():
    assert meets(">= 0.9", 5.0, 0.95, "x real time") is True
    assert meets("< 4 GB", 3.9, None, "GB") is True and meets("< 4 GB", 4.0, None, "GB") is False
    assert meets("<= 1.2", 10.0, 1.3, "s") is False
    assert meets(None, 1.0, 1.0, "s") is None
    r = record("x.y", 3.0, "frames/s", baseline="z", baseline_value=0.5, goal=">= 10")
    assert r["ratio"] == 6.0 and r["meets_goal"] is False


def test_only_keeps_the_other_benchmarks_results():
    old = [{"name": "loading.vs_csv", "value": 1.0}, {"name": "face_geom.x", "value": 2.0}]
    new = [{"name": "loading.vs_csv", "value": 3.0}]
    assert merge(old, new, ["loading"]) == [{"name": "face_geom.x", "value": 2.0}, *new]


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "bench").glob("*.py")))
def test_every_bench_module_imports(name):
    """The targeted measures outside ``make bench`` (``python -m bench.ridge_group``) import
    what they use, too: a renamed function of the package fails here, not on the next run."""
    import importlib

    importlib.import_module(f"bench.{name}")
