"""The whole-job anchor: ``experiments ablate`` against the same job written by hand (issue 15, item 2).

**What runs.** The ablation's grid (``experiments/configs/ablation.yaml`` on a store without
transcripts: feature sets speaker, listener and both; per set the two dummy baselines, ridge
on the 4 s and the 2 + 8 s windows, global and per listener, rescaled over all listeners or per
listener, and the gradient boosting on the 2 + 8 s windows: 36 configurations) on the
full-size synthetic store (80 sessions, 633,850 frames), two ways:

* **the package**: ``experiments ablate --set unseen_listener=false --set importance=false
  --set fusion=false --jobs 2`` (the loop computes neither the importance nor the late-fusion
  row, so neither does the package here) in a subprocess
  with a fresh MLflow database (the command of :mod:`bench.ablation`). End to end: reading and
  resampling the shards, windowing, the fits in two forked workers, post-processing, the CCC
  with its intervals over listeners and chance levels, the plots, the MLflow runs with their
  artifacts (predictions of every session), the reports.
* **the loop**: :mod:`bench.handwritten` in a subprocess, a plain pandas + scikit-learn script
  (read the tables, ``rolling`` windows, the same estimators, the same post-processing, the
  same CCC): scores only, nothing logged.

Both run the same configurations: the loop reads a plan, the grid that
:func:`experiments.config.expand` makes of ablation.yaml, written out as plain JSON with every
hyperparameter resolved (the loop itself imports nothing of the package).

**A fair start.** Both read the same features from disk, with the files in the page cache
(each side's files are read once before the timed runs):

* the package reads the HDF5 shards of the store. Its frames cache is cold: each run gets an
  empty cache folder (``OMG_FRAMES_CACHE``), so it resamples every shard and writes the cache,
  as a first run does. Numba's compiled windowing kernels come from their on-disk cache: an
  untimed warm-up (the same ablation with the dummy model only) compiles them if needed, which
  happens once per installation (about 10 s).
* the loop reads per-session Parquet tables at each channel's own rate, exported from the
  store by :func:`bench.loading.export_tables` (not counted: a researcher keeps extracted
  features as such tables; Parquet is the fastest of them to read, ``bench/loading.py``
  measures CSV). Reading them and resampling to 25 fps is counted.

Cores: the package runs two worker processes of one thread each (``--jobs 2``, the default of
``make ablate``); the loop is one process, in which scikit-learn uses both cores where it can
(OpenMP in the gradient boosting, BLAS) and pandas one. The unseen-listener runs are out of
scope (``unseen_listener=false``): the loop does not write them.

**Rounds.** The package runs ``package_rounds`` times (3; QUICK 1), the loop
``loop_rounds`` times (1: it is the long one), interleaved (package, loop, package, package).
Each run measures the CPU other processes used meanwhile (``/proc/stat`` minus the run's own),
as ``bench/scaling.py`` does: ``anchor.background_cores`` is its median over the runs. Records:

* ``anchor.vs_handwritten_loop`` (goal of issue 15: >= 5): configurations per minute of wall
  time, the package's median against the loop's; ``anchor.cpu_vs_handwritten_loop`` the same
  per minute of CPU time (user + system of the process tree), which waiting for a core on a
  shared machine does not inflate;
* ``anchor.package_seconds`` and ``anchor.handwritten_seconds``: the wall times;
* ``anchor.handwritten_model_seconds``: the loop's time in the estimators (fits and
  predictions) against its whole run: that share is the same scikit-learn code on both sides,
  and it bounds what any tool can gain on this grid;
* ``anchor.ceiling``: the loop's whole run divided by its time in the gradient-boosting fits
  and predictions (``models.hist_gb`` of its seconds; scikit-learn's OpenMP keeps both cores
  busy there): the ratio a tool would reach if everything else took no time and it fitted
  the same trees as fast as scikit-learn does. The trees must be the same for the same
  metrics, so no tool on this machine can beat it;
* ``anchor.metric_difference`` (goal <= 1e-6): the largest absolute difference of
  ``{val,test}.ccc_{personalized,generalized}`` between the loop and the package, over every
  configuration but the tree models';
* ``anchor.tree_metric_difference`` (no goal): the same over the gradient-boosting
  configurations. Their features differ from the package's in the last bits only (pandas'
  rolling sums and interpolation round differently from the package's kernels, and a constant
  stretch may give 1e-17 in one and exactly 0 in the other), but a tree's histogram binning
  turns a new distinct value into a new bin, and a different split moves a session's CCC (by
  up to 0.011 on the full-size store: differences this small between gradient-boosting
  configurations are noise). ``anchor.tree_metric_difference_same_features`` (goal <= 1e-6) checks that
  this is the only cause: the loop's own fitting, post-processing and scoring of those
  configurations, given the package's windowed features (of one feature set; QUICK: all);
* ``anchor.vs_ceiling`` (goal of issue 25: >= 0.9, with the two metric goals above kept): the
  package's speed-up over the loop (per package round, against the loop's median) divided by
  ``anchor.ceiling``; ``spread`` over the rounds, ``load`` (``/proc/loadavg`` before and after),
  ``quick`` (true at the QUICK sizes: computed, not judged).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.config.grid import Trial, expand
from experiments.config.loading import load_config
from experiments.models.factory import resolve_model_params

from . import handwritten, inputs
from .ablation import WITHOUT_TRANSCRIPTS, run_ablation
from .harness import loadavg, record
from .loading import export_tables
from .processes import RunStats, print_round, run_measured, with_load
from .scaling import GRID_ONLY, NO_EXTRAS, WARM_UP

FULL = {
    "n_sessions": 80,
    "length_range": None,
    "set": [WITHOUT_TRANSCRIPTS, GRID_ONLY, *NO_EXTRAS],
    "package_rounds": 3,
    "loop_rounds": 1,
    "same_features_sets": 1,
}
#: QUICK: the listener set on 16 short sessions (2 listeners), the gradient boosting with 20 trees, not 200
QUICK_MODELS = (
    "models=[{name: dummy, only: {window.lengths_s: [[4]], postprocess.rescale: [none]}}, "
    "{name: position_prior, only: {window.lengths_s: [[4]], postprocess.rescale: [none]}}, "
    "{name: ridge, alpha: [100], only: {postprocess.rescale: [train, listener]}}, "
    "{name: hist_gb, max_iter: [20], learning_rate: [0.05], max_depth: [3], "
    "only: {window.lengths_s: [[2, 8]], personalization: [global], postprocess.rescale: [train, listener]}}]"
)
QUICK = {
    "n_sessions": 16,
    "length_range": (500, 1000),
    "set": ["feature_set=[listener]", QUICK_MODELS, GRID_ONLY, *NO_EXTRAS],
    "package_rounds": 1,
    "loop_rounds": 1,
    "same_features_sets": None,
}
#: models whose predictions jump where a feature crosses a split (see the module docstring)
TREES = ("hist_gb", "xgboost")
METRICS = [
    f"{split}.ccc_{averaging}"
    for split in ("val", "test")
    for averaging in ("personalized", "generalized")
]
LOOP = "hand-written pandas + scikit-learn loop (bench/handwritten.py)"


def plan(overrides: list[str]) -> tuple[dict, dict[str, Trial]]:
    """The loop's plan (JSON-able) for ablation.yaml with ``overrides``, and its trials by id."""
    cfg = load_config("ablation", overrides)
    if cfg.protocol != "val" or cfg.unseen_listener:
        raise ValueError(
            "the hand-written loop writes the validation protocol without unseen listeners only"
        )
    trials = {t.hash(): t for t in expand(cfg)}
    configurations = [
        {
            "id": h,
            "channels": list(t.channels),
            "lengths_s": list(t.lengths_s),
            "delay_s": t.delay_s,
            "align": t.align,
            "stats": list(t.stats),
            "hop_s": t.hop_s,
            "model": t.model,
            "params": resolve_model_params(t.model, t.hyperparams),
            "personalization": t.personalization,
            "smooth_s": t.smooth_s,
            "smooth_method": t.smooth_method,
            "rescale": t.rescale,
            "fit_on": t.fit_on,
            "seed": t.seed,
        }
        for h, t in trials.items()
    ]
    splits = {name: [int(s) for s in stories] for name, stories in cfg.splits.items()}
    return {"target": cfg.target, "splits": splits, "configurations": configurations}, trials


def spread_of(values: list[float]) -> dict:
    """``record``'s spread arguments for a measure repeated ``len(values)`` times (none for one run)."""
    return {"spread": (min(values), max(values)), "repeats": len(values)} if len(values) > 1 else {}


def run_loop(tables: Path, plan_file: Path, out: Path) -> RunStats:
    """The hand-written loop in a subprocess: ``out/scores.csv``, ``out/seconds.json``; raises if it fails."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "handwritten.log"
    cmd = [
        sys.executable,
        "-m",
        "bench.handwritten",
        "--tables",
        str(tables),
        "--plan",
        str(plan_file),
        "--out",
        str(out / "scores.csv"),
        "--seconds",
        str(out / "seconds.json"),
    ]
    # the project's root on the path, so that ``-m bench.handwritten`` is found from any folder
    path = os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")])
    )
    stats = run_measured(cmd, log, env={"PYTHONPATH": path})
    if stats.returncode != 0:
        raise RuntimeError(
            f"the hand-written loop failed (exit {stats.returncode}); log {log}:\n{log.read_text()[-2000:]}"
        )
    return stats


def package_scores(out: Path) -> pd.DataFrame:
    """Per configuration id (config hash) of the ablation tracked in ``out``: its metrics and
    ``fit_seconds`` (the worker time of its fits, predictions and scores, shared among the
    configurations of a fit)."""
    import mlflow

    from experiments.tracking.tracker import CONFIG_HASH_TAG

    client = mlflow.MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id], max_results=10000)
    ]
    rows = [
        {
            "id": r.data.tags[CONFIG_HASH_TAG],
            **{m: r.data.metrics.get(m, np.nan) for m in [*METRICS, "fit_seconds"]},
        }
        for r in runs
        if CONFIG_HASH_TAG in r.data.tags
    ]
    return pd.DataFrame(rows).set_index("id")


def difference(loop: pd.DataFrame, package: pd.DataFrame, ids: list[str]) -> float:
    """Largest absolute difference of the metrics of configurations ``ids`` (NaN if there are none)."""
    if not ids:
        return float("nan")
    missing = [i for i in ids if i not in loop.index or i not in package.index]
    if missing:
        raise RuntimeError(
            f"configurations {missing[:3]} have no scores from "
            f"{'the loop' if missing[0] not in loop.index else 'the package'}"
        )
    return float(
        np.max(
            np.abs(
                loop.loc[ids, METRICS].to_numpy(float) - package.loc[ids, METRICS].to_numpy(float)
            )
        )
    )


def same_features_difference(
    store: Path, the_plan: dict, trials: dict[str, Trial], package: pd.DataFrame, n_sets: int | None
) -> tuple[float, list[str]]:
    """The loop's fits, post-processing and scores of the tree configurations (of the first ``n_sets``
    feature sets) on the package's own windowed features: their largest metric difference with the
    package's, and the ids compared."""
    from experiments.data.dataset import load_sessions
    from experiments.evaluation.evaluate import window_sessions

    trees = [c for c in the_plan["configurations"] if c["model"] in TREES]
    sets = list(dict.fromkeys(trials[c["id"]].feature_set for c in trees))[:n_sets]
    trees = [c for c in trees if trials[c["id"]].feature_set in sets]
    rows = []
    for group in handwritten.grouped(trees, handwritten.WINDOW):
        key = trials[group[0]["id"]].window_key()
        tables = load_sessions(
            store,
            sorted(key.channels),
            target=the_plan["target"],
            splits=the_plan["splits"],
            cache=False,
        )
        windowed = window_sessions(tables, key)
        del tables
        features = {s.session: pd.DataFrame(s.F, copy=False) for s in windowed.sessions}
        sessions = [
            {
                "session": s.session,
                "listener": s.listener,
                "story": s.story,
                "split": s.split,
                "y": s.y,
            }
            for s in windowed.sessions
        ]
        for same_fit in handwritten.grouped(group, handwritten.FIT):
            raw = handwritten.predictions(
                same_fit[0], sessions, features, any(c["rescale"] != "none" for c in same_fit)
            )
            rows += [{"id": c["id"], **handwritten.scores(c, sessions, raw)} for c in same_fit]
        del windowed, features
    loop = pd.DataFrame(rows).set_index("id") if rows else pd.DataFrame(columns=METRICS)
    ids = list(loop.index)
    return difference(loop, package, ids), ids


def warm_page_cache(*folders: Path) -> None:
    """Read every file below ``folders`` once, so that no timed run pays the disk."""
    for folder in folders:
        for p in folder.rglob("*"):
            if p.is_file():
                p.read_bytes()


def run(work: Path, quick: bool = False, rounds: int | None = None) -> list[dict]:
    """The interleaved package and loop runs; returns the records. ``rounds``: the package's
    rounds instead of the size's (at least 1; the loop runs once)."""
    size = QUICK if quick else FULL
    if rounds is not None:
        size = {**size, "package_rounds": max(1, rounds)}
    store = inputs.synth_store(work, size["n_sessions"], size["length_range"])
    tables = export_tables(store, work / f"{store.name}_tables", "parquet")
    the_plan, trials = plan(size["set"])
    out = work / (
        "anchor_run_quick" if quick else "anchor_run"
    )  # a quick run does not clobber a full one
    out.mkdir(parents=True, exist_ok=True)
    plan_file = out / "plan.json"
    plan_file.write_text(json.dumps(the_plan))
    n = len(the_plan["configurations"])

    # untimed: Numba's kernels compiled (once per installation), the shards and tables in the page cache
    run_ablation(
        store,
        out / "warm_up",
        [*size["set"], WARM_UP],
        env={"OMG_FRAMES_CACHE": str(out / "warm_up" / "frames")},
    )
    warm_page_cache(tables)

    package_runs, loop_runs = [], []
    load_before = loadavg()
    for r in range(max(size["package_rounds"], size["loop_rounds"])):
        if r < size["package_rounds"]:
            run_dir = out / "package"
            package_runs.append(
                with_load(
                    lambda d=run_dir: run_ablation(
                        store, d, size["set"], env={"OMG_FRAMES_CACHE": str(d / "frames")}
                    )
                )
            )
            print_round("anchor: package", r, package_runs[-1])
        if r < size["loop_rounds"]:
            loop_runs.append(with_load(lambda: run_loop(tables, plan_file, out / "handwritten")))
            print_round("anchor: hand-written loop", r, loop_runs[-1])

    load = {"before": load_before, "after": loadavg()}
    loop = pd.read_csv(out / "handwritten" / "scores.csv", index_col="id")
    loop_seconds = json.loads((out / "handwritten" / "seconds.json").read_text())
    package = package_scores(out / "package")
    tree_ids = [c["id"] for c in the_plan["configurations"] if c["model"] in TREES]
    other_ids = [c["id"] for c in the_plan["configurations"] if c["model"] not in TREES]
    diff, tree_diff = difference(loop, package, other_ids), difference(loop, package, tree_ids)
    same_diff, same_ids = same_features_difference(
        store, the_plan, trials, package, size["same_features_sets"]
    )

    wall = [s.wall_s for s, _ in package_runs]
    cpu = [s.cpu_s for s, _ in package_runs]
    loop_wall = [s.wall_s for s, _ in loop_runs]
    loop_cpu = [s.cpu_s for s, _ in loop_runs]
    busy = [o for _, o in package_runs + loop_runs]
    per_min = [60 * n / w for w in wall]
    model_s = float(package["fit_seconds"].sum())
    print(
        f"anchor: {n} configurations; package {statistics.median(wall):.1f} s "
        f"(rounds {', '.join(f'{w:.1f}' for w in wall)}; "
        f"{statistics.median(cpu):.0f} s of CPU; fits, predictions and scores {model_s:.0f} s of worker time), "
        f"hand-written loop {statistics.median(loop_wall):.1f} s ({statistics.median(loop_cpu):.0f} s of CPU; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in loop_seconds.items())
        + "); "
        f"CCC difference {diff:.2g} over {len(other_ids)} configurations, {tree_diff:.2g} over the {len(tree_ids)} "
        f"tree configurations ({same_diff:.2g} over {len(same_ids)} on the package's features)"
    )
    loop_name = f"{LOOP}, {n} configurations"
    # the loop's trees, fitted by scikit-learn on both cores: no tool that fits the same trees is faster
    trees_s = sum(loop_seconds.get(f"models.{name}", 0.0) for name in TREES)
    return [
        record(
            "anchor.vs_handwritten_loop",
            statistics.median(per_min),
            "configurations/min",
            baseline=loop_name,
            baseline_value=60 * n / statistics.median(loop_wall),
            goal=">= 5",
            **spread_of(per_min),
        ),
        record(
            "anchor.cpu_vs_handwritten_loop",
            60 * n / statistics.median(cpu),
            "configurations/CPU-min",
            baseline=loop_name,
            baseline_value=60 * n / statistics.median(loop_cpu),
        ),
        record("anchor.package_seconds", statistics.median(wall), "s", **spread_of(wall)),
        record(
            "anchor.handwritten_seconds", statistics.median(loop_wall), "s", **spread_of(loop_wall)
        ),
        record(
            "anchor.handwritten_model_seconds",
            loop_seconds["models"],
            "s",
            baseline="the loop's whole run",
            baseline_value=loop_seconds["total"],
        ),
        record(
            "anchor.metric_difference",
            diff,
            "CCC",
            goal="<= 1e-6 CCC",
            baseline=f"{LOOP} vs. experiments ablate, {len(other_ids)} configurations (all but the trees')",
        ),
        record(
            "anchor.tree_metric_difference",
            tree_diff,
            "CCC",
            baseline=f"{LOOP} vs. experiments ablate, the {len(tree_ids)} gradient-boosting configurations",
        ),
        record(
            "anchor.tree_metric_difference_same_features",
            same_diff,
            "CCC",
            goal="<= 1e-6 CCC",
            baseline=f"the loop's models on the package's windowed features, {len(same_ids)} configurations",
        ),
        record("anchor.background_cores", float(np.median(busy)), "cores", **spread_of(busy)),
    ] + (
        ceiling_records(
            loop_seconds["total"] / trees_s,
            trees_s,
            [p / (60 * n / statistics.median(loop_wall)) for p in per_min],
            metrics_kept=diff <= 1e-6 and same_diff <= 1e-6,
            load=load,
            quick=quick,
        )
        if trees_s > 0
        else []
    )


def ceiling_records(
    ceiling: float,
    trees_s: float,
    speedups: list[float],
    metrics_kept: bool,
    load: dict,
    quick: bool,
) -> list[dict]:
    """``anchor.ceiling`` and ``anchor.vs_ceiling`` (goal of issue 25: >= 0.9 with the metric
    goals kept): the package's speed-up over the loop, per package round, divided by the
    ceiling. ``meets_goal`` is False when a metric goal is missed, whatever the ratio; ``quick``
    marks a QUICK run, whose sizes are not the goal's (computed, not judged)."""
    fractions = [x / ceiling for x in speedups]
    vs = record(
        "anchor.vs_ceiling",
        statistics.median(speedups),
        "x",
        baseline="anchor.ceiling: the loop's whole run against its gradient-boosting fits",
        baseline_value=ceiling,
        goal=">= 0.9",
        spread=(min(speedups), max(speedups)),
        repeats=len(speedups),
    )
    vs["meets_goal"] = bool(vs["meets_goal"]) and metrics_kept
    vs.update(
        ratio_spread=[min(fractions), max(fractions)],
        metric_goals_kept=metrics_kept,
        load=load,
        quick=quick,
    )
    return [
        record(
            "anchor.ceiling",
            ceiling,
            "x",
            baseline=f"the loop's whole run against its gradient-boosting fits and predictions ({trees_s:.1f} s)",
        ),
        vs,
    ]
