"""Ablation time at 10, 20, 40, 80 and 160 sessions: is it linear in the size of the corpus?

For each size a synthetic store (real session lengths; 160 sessions are 20 listeners x 8
stories) is swept by the same ``experiments ablate`` run as :mod:`bench.ablation` (subprocess,
fresh tracking database, 2 jobs), its grid only (``unseen_listener=false``): the unseen-listener
protocol fits one model per listener on the other listeners' sessions, so its cost grows as
listeners x sessions by design (160 sessions have twice the listeners of 80), and
:mod:`bench.ablation` reports it on its own. Each store is first warmed up, untimed, by the same ablation
with only the dummy model (it writes the store's frames cache and compiles the windowing
kernels once, costs a first run would otherwise pay alone). The sizes are then run
``repeat`` times (3; QUICK 2), the order
reversed every other round so that a drift of the machine's load does not favour one end;
each record's value is the median over the rounds, ``spread`` the [min, max].

On a machine shared with other work, wall time also counts the waiting for a core. Each run
measures the CPU other processes used meanwhile (``/proc/stat`` minus the run's own); a run
during which they averaged more than :data:`BUSY_CORES` cores is run again, up to
:data:`RETRIES` times (QUICK: never), and the least disturbed attempt is kept.
``scaling.background_cores`` reports the median over the kept runs of that load. Time is
compared with two references:

* per size, the least-squares line ``a + b * frames`` through the medians of all sizes
  (``a`` is the fixed cost: interpreter and MLflow start-up, the dummy baseline ...); a point
  far above the line means the cost grows faster than linearly there;
* ``scaling.marginal_cost``: seconds per million frames added from 80 to 160 sessions
  against the same from 10 to 80 (fixed costs cancel), each the median over the rounds of
  that round's marginal cost. Above 1 means growing cost per frame.
  ``scaling.marginal_cost_cpu`` is the same for the CPU time of the process tree (user +
  system), which waiting for a core on a shared machine does not inflate.

Goal (issues 5 and 15): within 1.2x of linear. QUICK: 8 and 16 short sessions (the stores of
the quick ablation and anchor, made once), a tiny grid; the marginal cost from 8 to 16 sessions
is compared with the average cost at 8. A quick run is a smoke check of the records, not a
measure, so it runs no busy round again.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from featurestore.storage.store import Store

from . import inputs
from .ablation import FULL as ABLATION_FULL
from .ablation import QUICK as ABLATION_QUICK
from .ablation import run_ablation
from .harness import record
from .processes import RunStats, with_load

#: the grid of the ablation, without the unseen-listener runs (see the module docstring)
GRID_ONLY = "unseen_listener=false"
#: the ablation's steps after the grid that the hand-written loop does not do (the channels'
#: permutation importance, the late-fusion row): off where the package is timed against the loop
#: or against itself, so both sides do the same work
NO_EXTRAS = ["importance=false", "fusion=false"]
#: a run during which other processes used more cores than this on average is repeated ...
BUSY_CORES = 0.5
#: ... at most this many times (the least disturbed attempt is kept)
RETRIES = 2
FULL = {
    "sizes": (10, 20, 40, 80, 160),
    "length_range": None,
    "set": [*ABLATION_FULL["set"], GRID_ONLY, *NO_EXTRAS],
    "repeat": 3,
    "retries": RETRIES,
}
QUICK = {
    "sizes": (8, 16),
    "length_range": (500, 1000),
    "set": [*ABLATION_QUICK["set"], GRID_ONLY, *NO_EXTRAS],
    "repeat": 2,
    "retries": 0,
}
#: the untimed warm-up's grid: the same feature sets and windows, the dummy model only
WARM_UP = "models=[{name: dummy}]"


def marginal_costs(
    sizes: list[int], seconds: np.ndarray, mframes: np.ndarray
) -> tuple[float, float, str]:
    """(late, early, what early is): seconds per million frames added, see the module docstring."""
    if len(sizes) >= 3 and 80 in sizes:
        i0, i80, last = 0, sizes.index(80), len(sizes) - 1
        late = (seconds[last] - seconds[i80]) / (mframes[last] - mframes[i80])
        early = (seconds[i80] - seconds[i0]) / (mframes[i80] - mframes[i0])
        return late, early, f"marginal cost from {sizes[i0]} to 80 sessions"
    late = (seconds[-1] - seconds[0]) / (mframes[-1] - mframes[0])
    return late, seconds[0] / mframes[0], f"average cost at {sizes[0]} sessions"


def quiet_run(
    store: Path, out: Path, overrides: list[str], retries: int = RETRIES
) -> tuple[RunStats, float]:
    """An ablation and the cores other processes used during it (mean), repeated while that
    exceeds :data:`BUSY_CORES` (at most ``retries`` times); the least disturbed attempt."""
    best: tuple[RunStats, float] | None = None
    for attempt in range(1 + retries):
        stats, others = with_load(lambda: run_ablation(store, out, overrides))
        if best is None or others < best[1]:
            best = (stats, others)
        if others <= BUSY_CORES or attempt == retries:
            break
        print(
            f"scaling: other processes used {others:.2f} cores meanwhile ({stats.wall_s:.1f} s): run again",
            flush=True,
        )
    return best


def run(work: Path, quick: bool = False) -> list[dict]:
    """``repeat`` measured ablations per size; returns the records."""
    plan = QUICK if quick else FULL
    sizes = list(plan["sizes"])
    stores = {n: inputs.synth_store(work, n, plan["length_range"]) for n in sizes}
    mframes = (
        np.array([Store(stores[n]).sessions().n_frames.sum() for n in sizes], dtype=float) / 1e6
    )
    for size in sizes:
        stats = run_ablation(stores[size], work / f"scaling_run_{size}", [*plan["set"], WARM_UP])
        print(f"scaling: warm-up of {size} sessions: {stats.wall_s:.1f} s", flush=True)
    wall = np.full((plan["repeat"], len(sizes)), np.nan)
    cpu, busy = np.full_like(wall, np.nan), np.full_like(wall, np.nan)
    for r in range(plan["repeat"]):
        order = range(len(sizes)) if r % 2 == 0 else reversed(range(len(sizes)))
        for i in order:
            stats, busy[r, i] = quiet_run(
                stores[sizes[i]], work / f"scaling_run_{sizes[i]}", plan["set"], plan["retries"]
            )
            wall[r, i], cpu[r, i] = stats.wall_s, stats.cpu_s
            print(
                f"scaling: round {r + 1}, {sizes[i]} sessions, {mframes[i] * 1e6:,.0f} frames: {stats.wall_s:.1f} s "
                f"({stats.cpu_s:.0f} s of CPU; other processes: {busy[r, i]:.2f} cores)",
                flush=True,
            )
    n = plan["repeat"]
    med = np.median(wall, axis=0)
    b, a = np.polyfit(mframes, med, 1)
    out = [
        record(
            f"scaling.ablation_{size}_sessions",
            med[i],
            "s",
            baseline="least-squares line a + b * frames over all sizes",
            baseline_value=a + b * mframes[i],
            goal="<= 1.2",
            spread=(wall[:, i].min(), wall[:, i].max()),
            repeats=n,
        )
        for i, size in enumerate(sizes)
    ]
    for name, times in (("scaling.marginal_cost", wall), ("scaling.marginal_cost_cpu", cpu)):
        per_round = [marginal_costs(sizes, times[r], mframes) for r in range(n)]
        late = [x[0] for x in per_round]
        early = statistics.median(x[1] for x in per_round)
        ratios = ", ".join(f"{x[0] / x[1]:.2f}" for x in per_round)
        print(f"{name}: per round {ratios} (late / early)")
        out.append(
            record(
                name,
                statistics.median(late),
                "s per million frames",
                baseline=per_round[0][2],
                baseline_value=early,
                goal="<= 1.2",
                spread=(min(late), max(late)),
                repeats=n,
            )
        )
    out.append(
        record(
            "scaling.background_cores",
            float(np.median(busy)),
            "cores",
            spread=(float(busy.min()), float(busy.max())),
            repeats=busy.size,
        )
    )
    return out
