"""Issue 25 goals (item 4) measured as ratios within one run: the nested unseen-listener
protocol against the grid alone, and the ablation's peak memory.

Per round (3; QUICK 1; ``--rounds``) two ``experiments ablate`` runs on the same store,
interleaved, each from a fresh tracking database (the command of :mod:`bench.ablation`), both
without the steps that follow the grid and do not differ between them (the channels'
permutation importance and the late-fusion row: ``importance=false``, ``fusion=false``), so the
ratio's denominator is the grid and its selection:

* **the grid**: ``unseen_listener=false``, the sweep only;
* **nested**: ``unseen_listener={selection: nested}`` (the packaged default,
  :mod:`experiments.studies.unseen`): every generalized configuration also fitted once per
  held-out listener without that listener, a configuration chosen per listener without them.

Records (each with ``spread`` over the rounds, ``load``: ``/proc/loadavg`` before and after
the rounds, ``ratio_spread`` for the ratios, and ``quick``: true when measured at the QUICK
sizes, where the goals are not judged):

* ``unseen.nested_vs_grid`` (goal <= 1.5): the nested protocol's extra wall time (nested run
  minus grid run of the same round) against the grid's own wall time;
  ``unseen.nested_cpu_vs_grid`` the same in CPU time (user + system of the process tree);
* ``unseen.grid_seconds``, ``unseen.nested_seconds`` (wall) and their ``*_cpu_seconds``;
* ``unseen.peak_memory_pss`` (goal <= 3 GB): the nested run's peak PSS (its largest round).

Sizes are those of :mod:`bench.ablation` (FULL: 80 sessions; QUICK: 8 short sessions, ridge).
FULL runs an untimed warm-up first (the grid with the dummy model only), as :mod:`bench.anchor`
does; QUICK skips it to stay cheap, so its first run may include compiling the kernels.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from . import inputs
from .ablation import FULL, QUICK, run_ablation
from .harness import loadavg, record
from .processes import print_round, with_load
from .scaling import GRID_ONLY, NO_EXTRAS, WARM_UP

ROUNDS = {"full": 3, "quick": 1}

NESTED = "unseen_listener={selection: nested}"


def run(work: Path, quick: bool = False, rounds: int | None = None) -> list[dict]:
    """The interleaved grid and nested runs; returns the records. ``rounds``: instead of
    :data:`ROUNDS` (at least 1)."""
    size = QUICK if quick else FULL
    size = {**size, "set": [*size["set"], *NO_EXTRAS]}
    rounds = max(1, rounds) if rounds is not None else ROUNDS["quick" if quick else "full"]
    store = inputs.synth_store(work, size["n_sessions"], size["length_range"])
    out = work / ("unseen_run_quick" if quick else "unseen_run")
    if not quick:  # untimed: Numba's kernels compiled if needed, the shards in the page cache
        run_ablation(store, out / "warm_up", [*size["set"], GRID_ONLY, WARM_UP])
    load_before = loadavg()
    grid, nested = [], []
    for r in range(rounds):
        for runs, override, name in ((grid, GRID_ONLY, "grid"), (nested, NESTED, "nested")):
            d = out / name
            runs.append(
                with_load(
                    lambda d=d, o=override: run_ablation(
                        store, d, [*size["set"], o], env={"OMG_FRAMES_CACHE": str(d / "frames")}
                    )
                )
            )
            print_round(f"unseen: {name}", r, runs[-1])
    load = {"before": load_before, "after": loadavg()}
    extra = {"load": load, "quick": quick}
    wall_ratio = [
        (n.wall_s - g.wall_s) / g.wall_s for (g, _), (n, _) in zip(grid, nested, strict=True)
    ]
    cpu_ratio = [(n.cpu_s - g.cpu_s) / g.cpu_s for (g, _), (n, _) in zip(grid, nested, strict=True)]

    def rec(name: str, values: list[float], unit: str, **kw) -> dict:
        spread = {"spread": (min(values), max(values)), "repeats": len(values)}
        return {**record(name, statistics.median(values), unit, **spread, **kw), **extra}

    g_wall = statistics.median(s.wall_s for s, _ in grid)
    g_cpu = statistics.median(s.cpu_s for s, _ in grid)
    out_records = [
        # the ratio is the value itself (extra time / grid time): the goal names no unit
        {
            **record(
                "unseen.nested_vs_grid",
                statistics.median(wall_ratio) * g_wall,
                "s",
                baseline="the grid alone (unseen_listener=false), same round",
                baseline_value=g_wall,
                goal="<= 1.5",
                spread=(min(wall_ratio) * g_wall, max(wall_ratio) * g_wall),
                repeats=len(wall_ratio),
            ),
            "ratio_spread": [min(wall_ratio), max(wall_ratio)],
            **extra,
        },
        {
            **record(
                "unseen.nested_cpu_vs_grid",
                statistics.median(cpu_ratio) * g_cpu,
                "s",
                baseline="the grid alone, CPU seconds, same round",
                baseline_value=g_cpu,
                spread=(min(cpu_ratio) * g_cpu, max(cpu_ratio) * g_cpu),
                repeats=len(cpu_ratio),
            ),
            "ratio_spread": [min(cpu_ratio), max(cpu_ratio)],
            **extra,
        },
        rec("unseen.grid_seconds", [s.wall_s for s, _ in grid], "s"),
        rec("unseen.nested_seconds", [s.wall_s for s, _ in nested], "s"),
        rec("unseen.grid_cpu_seconds", [s.cpu_s for s, _ in grid], "s"),
        rec("unseen.nested_cpu_seconds", [s.cpu_s for s, _ in nested], "s"),
        rec("unseen.background_cores", [o for _, o in grid + nested], "cores"),
    ]
    pss = [s.peak_pss_gb for s, _ in nested if s.peak_pss_gb is not None]
    if pss:
        out_records.append(
            {
                **record(
                    "unseen.peak_memory_pss",
                    max(pss),
                    "GB",
                    goal="<= 3 GB",
                    spread=(min(pss), max(pss)),
                    repeats=len(pss),
                ),
                **extra,
            }
        )
    return out_records
