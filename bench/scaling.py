"""Ablation time at 10, 20, 40, 80 and 160 sessions: is it linear in the size of the corpus?

For each size a synthetic store (real session lengths; 160 sessions are 20 listeners x 8
stories) is swept by the same ``experiments ablate`` run as :mod:`bench.ablation` (subprocess,
fresh tracking database, 2 jobs). Time is compared with two references:

* per size, the least-squares line ``a + b * frames`` through all sizes (``a`` is the fixed
  cost: interpreter and MLflow start-up, the dummy baseline ...); a point far above the line
  means the cost grows faster than linearly there;
* ``scaling.marginal_cost``: seconds per million frames added from 80 to 160 sessions
  against the same from 10 to 80 (fixed costs cancel). Above 1 means growing cost per frame.

Goal (issue 5): within 1.2x of linear. QUICK: 10 and 20 short sessions, a tiny grid; the
marginal cost from 10 to 20 sessions is compared with the average cost at 10.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from featurestore.store import Store

from . import inputs
from .ablation import FULL as ABLATION_FULL
from .ablation import QUICK as ABLATION_QUICK
from .ablation import run_ablation
from .harness import record

FULL = {"sizes": (10, 20, 40, 80, 160), "length_range": None, "set": ABLATION_FULL["set"]}
QUICK = {"sizes": (10, 20), "length_range": (500, 1000), "set": ABLATION_QUICK["set"]}


def run(work: Path, quick: bool = False) -> list[dict]:
    """One measured ablation per size; returns the records."""
    plan = QUICK if quick else FULL
    sizes, seconds, frames = [], [], []
    for n in plan["sizes"]:
        store = inputs.synth_store(work, n, plan["length_range"])
        stats = run_ablation(store, work / f"scaling_run_{n}", plan["set"])
        sizes.append(n)
        seconds.append(stats.wall_s)
        frames.append(int(Store(store).sessions().n_frames.sum()))
        print(f"scaling: {n} sessions, {frames[-1]:,} frames: {stats.wall_s:.1f} s")
    t, f = np.array(seconds), np.array(frames, dtype=float) / 1e6
    b, a = np.polyfit(f, t, 1)
    out = [
        record(f"scaling.ablation_{n}_sessions", s, "s", baseline="least-squares line a + b * frames over all sizes",
               baseline_value=a + b * x, goal="<= 1.2")
        for n, s, x in zip(sizes, t, f, strict=True)
    ]  # fmt: skip
    if len(sizes) >= 3 and 80 in sizes:
        i10, i80, ilast = 0, sizes.index(80), len(sizes) - 1
        late = (t[ilast] - t[i80]) / (f[ilast] - f[i80])
        early = (t[i80] - t[i10]) / (f[i80] - f[i10])
        what = f"marginal cost from {sizes[i10]} to 80 sessions"
        out.append(record("scaling.marginal_cost", late, "s per million frames", baseline=what, baseline_value=early, goal="<= 1.2"))
    else:
        late = (t[-1] - t[0]) / (f[-1] - f[0])
        out.append(record("scaling.marginal_cost", late, "s per million frames",
                          baseline=f"average cost at {sizes[0]} sessions", baseline_value=t[0] / f[0], goal="<= 1.2"))  # fmt: skip
    return out
