"""Sweep a config's grid over a feature store and log every configuration to MLflow: a plan of
tasks (:func:`plan`) mapped by a backend (:func:`evaluate`); docs/design.md, Architecture. The
processes and Dask backends schedule a sweep their own way (:mod:`experiments.engine`).

>>> from experiments.config import load_config
>>> [t.model for t in _order(_ensure_baseline(expand(load_config("smoke"))))][:2]
['dummy', 'ridge']
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from featurestore import Store
from featurestore.errors import ConfigError
from featurestore.parallel import Backend, Result
from featurestore.parallel.dask import DaskBackend
from featurestore.parallel.processes import ProcessesBackend

from ..config.grid import Trial, WindowKey, expand
from ..config.models import BASELINE
from ..config.schema import ExperimentConfig
from ..data.dataset import DatasetError
from ..engine.dask import map_on_dask
from ..engine.forked import map_forked
from ..evaluation.evaluate import Task, TaskData, forget, plan_tasks, run_task
from ..tracking.child_runs import UNSEEN_OF_TAG, Outcome, RunRow
from ..tracking.context import SweepContext
from ..tracking.redact import mask_all
from . import parent_run
from .parent_run import ParentRun, SweepOptions, SweepResult, as_store

#: names outside code imports from here (defined in the modules above)
__all__ = [
    "UNSEEN_OF_TAG",
    "SweepOptions",
    "SweepResult",
    "evaluate",
    "grid_trials",
    "plan",
    "run_sweep",
]


def _order(trials: Sequence[Trial]) -> list[Trial]:
    """Dummy baselines first, then grouped by window key, and within it by fit key (stable)."""
    keys: dict[WindowKey, int] = {}
    fits: dict[Trial, int] = {}
    for t in trials:
        keys.setdefault(t.window_key(), len(keys))
        fits.setdefault(t.fit_key(), len(fits))
    return sorted(
        trials, key=lambda t: (t.model != BASELINE, keys[t.window_key()], fits[t.fit_key()])
    )


def _ensure_baseline(trials: list[Trial]) -> list[Trial]:
    """A ``dummy`` baseline first for each target whose grid has none."""
    firsts: dict[str, Trial] = {}
    for t in trials:
        firsts.setdefault(t.target, t)
    have = {t.target for t in trials if t.model == BASELINE}
    plain: dict[str, Any] = {"model_params": (), "personalization": "global", "smooth_s": 0.0}
    baselines = [
        replace(t0, model=BASELINE, rescale="none", **plain)
        for target, t0 in firsts.items()
        if target not in have
    ]
    return [*baselines, *trials]


def _fixed_unseen(cfg: ExperimentConfig, trials: Sequence[Trial], run: ParentRun) -> list[Trial]:
    """``unseen_listener: {selection: fixed, configuration: X}``: the grid's configuration whose
    label or config hash is X, scored on left-out listeners (unless done)."""
    name = cfg.unseen_configuration
    named = [
        t
        for t in trials  # with several targets, a label without its target names each target's
        if name in (t.label(), replace(t, named_target=False).label(), t.hash())
        and t.track == "generalized"
    ]
    if not named:
        raise ConfigError(
            f"{cfg.source}: unseen_listener.configuration {name!r} is no generalized configuration "
            "of the grid; give a child run's label (tag mlflow.runName) or config_hash"
        )
    todo = [replace(t, unseen_listener=True) for t in named]
    return [t for t in todo if run.finished.get(t.hash()) is None]


def grid_trials(cfg: ExperimentConfig) -> list[Trial]:
    """The configurations a sweep of ``cfg`` runs, in its order: the grid, a ``dummy`` baseline
    when it has none, and under nested unseen-listener selection every generalized configuration
    marked to be fitted without each listener in turn (ConfigError under a protocol other than
    ``val`` or ``loso``)."""
    trials = _order(_ensure_baseline(expand(cfg)))
    if cfg.unseen_listener and cfg.unseen_selection == "nested":
        # every generalized configuration fitted without each listener in turn (under loso, each
        # fold too): their scores on the other listeners choose each left-out listener's
        # configuration (experiments.studies.unseen)
        if cfg.protocol not in ("val", "loso"):
            raise ConfigError(
                f"{cfg.source}: unseen_listener.selection nested chooses on the other listeners' "
                f"validation (val) or leave-one-story-out (loso) scores, not under protocol "
                f"{cfg.protocol}, which holds persons out already; use protocol val or loso, "
                "or unseen_listener: false"
            )
        trials = [
            replace(t, unseen_listener=True, unseen_nested=True) if t.track == "generalized" else t
            for t in trials
        ]
    return trials


def plan(
    cfg: ExperimentConfig,
    store: Store,
    trials: Sequence[Trial],
    backend: Backend,
    figures: bool,
    left_out: Sequence[str] = (),
) -> list[Task]:
    """The tasks that evaluate ``trials`` (of ``cfg``'s target) on ``store``, a fit group each (on a
    remote backend reading the store's absolute folder, its sessions listed here), the sessions
    ``left_out`` (without labels) out of them."""
    root = store.root.resolve() if backend.remote else store.root
    listed = backend.remote or left_out
    data = TaskData(
        store=str(root),
        channels=tuple(sorted({c for t in trials for c in t.channels})),
        target=cfg.target,
        splits=tuple((k, tuple(v)) for k, v in sorted(cfg.splits.items())),
        gold_standard=cfg.gold_standard,
        sessions=tuple(s for s in store.list_sessions() if s not in left_out) if listed else None,
    )
    return plan_tasks(trials, data, figures)


def _mapped(backend: Backend, tasks: Sequence[Task], log: SweepContext) -> Iterator[Result]:
    """The tasks' results on ``backend``: its own schedule of a sweep, else :func:`run_task` mapped."""
    if isinstance(backend, ProcessesBackend):
        return map_forked(backend, tasks, log)
    if isinstance(backend, DaskBackend):
        return map_on_dask(backend, tasks, log)
    return backend.map(run_task, tasks, raises=(DatasetError,))


def evaluate(run: ParentRun, todo: Sequence[Trial], on_outcome: Callable[[Outcome], None]) -> None:
    """Evaluate ``todo`` on the run's backend, one target at a time, handing each :class:`Outcome`
    to ``on_outcome`` as it comes; one another sweep claimed is waited for, then reused once it
    finished (or evaluated here when that sweep ended without it)."""
    targets = list(dict.fromkeys(t.target for t in todo))
    for target in targets:
        cfg = run.cfg.for_target(target) if len(targets) > 1 else run.cfg
        waiting = run.counted([t for t in todo if t.target == target])
        log, first = replace(run.context, cfg=cfg), True
        while waiting:
            part, done, waiting = run.claim(waiting)
            for t, row in done:  # finished by another sweep: its run, as this sweep's row
                on_outcome(Outcome(t, row=row))
            left_out = run.without_labels.get(target, [])
            tasks = plan(cfg, run.store, part, run.backend, run.options.log_artifacts, left_out)
            try:
                for task, result in zip(tasks, _mapped(run.backend, tasks, log), strict=True):
                    values = result.value or [None] * len(task.trials)
                    for t, v in zip(task.trials, values, strict=True):
                        worker_row = v if isinstance(v, RunRow) else None
                        on_outcome(Outcome(t, None if worker_row else v, worker_row, result.error))
            finally:
                forget()
            if waiting:
                if first and run.bar is not None:
                    run.bar.set_description(f"waiting for {len(waiting)} claimed by another sweep")
                first = False
                time.sleep(parent_run.CLAIM_POLL_S)


def run_sweep(
    cfg: ExperimentConfig,
    store: Store | str | os.PathLike = "features",
    options: SweepOptions | None = None,
) -> SweepResult:
    """Run every configuration of ``cfg``'s grid and log them to MLflow; a configuration with a
    FINISHED run of its hash on the same store by the same code is reused unless
    ``options.resume`` is False (the rest: :class:`SweepOptions`). Returns a :class:`SweepResult`
    (``table``: a row per configuration with its run id, status, params and metrics).
    ConfigError: an Optuna search (:func:`experiments.studies.search.run_search` runs it), an
    unknown backend, or an unusable unseen-listener selection."""
    if cfg.search.method == "optuna":
        raise ConfigError(
            f"{cfg.source}: search.method optuna is a search, not a grid: run it with "
            "experiments.studies.search.run_search (`experiments sweep` does)"
        )
    trials = grid_trials(cfg)
    run = ParentRun(cfg, as_store(store), options or SweepOptions())
    todo = [t for t in trials if run.finished.get(t.hash()) is None]
    progress_bar = {"total": len(todo), "desc": "configurations", "unit": "cfg"}
    with run.opened("sweep", {"n_configurations": len(trials)}, progress=progress_bar):
        _log_resolved_config(run)
        for t in trials:
            run.reused(t)

        def record(outcome: Outcome) -> None:
            row = run.record(outcome)
            run.bar.update(1)
            run.notify(row)

        evaluate(run, todo, record)
        if cfg.unseen_listener and cfg.unseen_selection != "nested":
            extra = (
                _fixed_unseen(cfg, trials, run)
                if cfg.unseen_selection == "fixed"
                else run.unseen_listener_todo(trials)
            )
            if extra:
                run.bar.total += len(extra)
                run.bar.set_description("unseen listeners")
                evaluate(run, extra, record)
                todo += extra
    return run.result(skipped=len(trials) - len(todo))


def _log_resolved_config(run: ParentRun) -> None:
    """The parent run's ``config.yaml``: the resolved config (every default filled in) and the code."""
    with tempfile.TemporaryDirectory() as tmp:
        text = yaml.safe_dump(
            {"config": mask_all(run.cfg.to_dict()), "code": run.code.tags()}, sort_keys=False
        )
        (Path(tmp) / "config.yaml").write_text(text)
        run.tracker.log_artifacts(run.id, tmp)
