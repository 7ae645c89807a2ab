"""One ridge fit group of the full-size ablation, fitted from sufficient statistics and by the pipeline.

    python -m bench.ridge_group [--sessions 80] [--personalization global] [--work bench/.work]

The group is the ablation's ridge on the ``both`` feature set with the multi-scale windows
(2 s and 8 s; mean, std, slope), rescaling fitted out of fold and, for ``global``, the
unseen-listener protocol: the main fit, one fit per training story, one per held-out listener
and one per held-out listener and training story (``per_listener``: a model per listener in
each of the main and out-of-fold fits). BLAS runs on one thread, as in each worker of
``--jobs 2``. Prints one JSON line: the seconds (wall and CPU) of
:func:`experiments.evaluation.fitting.fit_group` both ways (windowing excluded), their ratios,
the number of fits, the training rows and columns, the largest difference between the two
ways' predictions and CCC, and the peak of the memory allocated during each way's fits
(``tracemalloc``, which numpy reports to; the windowed features, allocated before, not
counted). Not part of ``make bench`` (a targeted measure).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from bench import inputs
from experiments.config.loading import expand, load_config
from experiments.data.dataset import load_sessions
from experiments.evaluation import fitting
from experiments.evaluation.evaluate import split_sessions, window_sessions
from experiments.evaluation.metrics import ccc


def main() -> None:
    """Measure and print the record (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=80)
    ap.add_argument("--personalization", default="global", choices=["global", "per_listener"])
    ap.add_argument("--work", type=Path, default=inputs.WORK)
    args = ap.parse_args()
    threadpool_limits(limits=1)
    store = inputs.synth_store(args.work, args.sessions)
    cfg = load_config(
        "ablation",
        [
            "feature_set=[both]",
            f"personalization=[{args.personalization}]",
            "unseen_listener=true",
        ],
    )
    trial = next(
        t
        for t in expand(cfg)
        if t.model == "ridge" and t.rescale == "train" and len(t.lengths_s) == 2
    )
    tables = load_sessions(store, list(trial.channels), splits=dict(trial.splits))
    w = window_sessions(tables, trial.window_key())
    sets = split_sessions(w, dict(trial.splits))
    train, evaluate = sets["train"], sets["val"] + sets["test"]
    need_unseen = args.personalization == "global"
    parts = fitting.fit_parts(trial, train, evaluate, True, need_unseen)

    tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    fast = fitting.fit_group(trial, train, evaluate, True, need_unseen)
    closed_s, closed_cpu = time.perf_counter() - t0, time.process_time() - c0
    closed_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    real = fitting.closed_form_parts
    fitting.closed_form_parts = lambda *a, **k: {}  # type: ignore[assignment]
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        slow = fitting.fit_group(trial, train, evaluate, True, need_unseen)
        pipeline_s, pipeline_cpu = time.perf_counter() - t0, time.process_time() - c0
        pipeline_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        fitting.closed_form_parts = real
    by_id = {s.session: s for s in w.sessions}
    diff = ccc_diff = 0.0
    for mine, theirs in ((fast.evaluated, slow.evaluated), (fast.unseen, slow.unseen)):
        for sid, p in theirs.items():
            diff = max(diff, float(np.abs(mine[sid] - p).max()))
            y = by_id[sid].y
            ok = np.isfinite(y)
            ccc_diff = max(ccc_diff, abs(ccc(y[ok], mine[sid][ok]) - ccc(y[ok], p[ok])))
    print(
        json.dumps(
            {
                "personalization": args.personalization,
                "parts": len(parts),
                "train_rows": fast.n_rows,
                "columns": int(train[0].F.shape[1]),
                "closed_form_s": round(closed_s, 2),
                "pipeline_s": round(pipeline_s, 2),
                "speedup": round(pipeline_s / closed_s, 1),
                "closed_form_cpu_s": round(closed_cpu, 2),
                "pipeline_cpu_s": round(pipeline_cpu, 2),
                "cpu_speedup": round(pipeline_cpu / closed_cpu, 1),
                "load_1min": round(os.getloadavg()[0], 1),
                "closed_form_peak_gb": round(closed_peak / 1e9, 3),
                "pipeline_peak_gb": round(pipeline_peak / 1e9, 3),
                "features_gb": round(sum(s.F.nbytes for s in w.sessions) / 1e9, 3),
                "max_prediction_diff": diff,
                "max_ccc_diff": ccc_diff,
            }
        )
    )


if __name__ == "__main__":
    main()
