"""Layer 8, the studies: what a user runs, built on the layers below.

Modules: :mod:`~.parent_run` (a sweep's parent run: resume, child runs, summary),
:mod:`~.sweep` (the grid, :func:`~.sweep.run_sweep`), :mod:`~.search` (Optuna),
:mod:`~.ablation` (speaker / listener / both), :mod:`~.fusion` (its late-fusion row),
:mod:`~.agreement` (between label targets),
:mod:`~.distributed` (a sweep on a Dask cluster).

This ``__init__`` imports nothing, so a worker that needs one module loads only that one.
"""
