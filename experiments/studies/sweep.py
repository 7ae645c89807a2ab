"""Sweep a config's grid over a feature store and log every configuration to MLflow.

One experiment per config (``tracking.experiment``), a parent run per sweep, one child run per
configuration, the baseline first; the configurations ordered so that the windowed features are
computed once per window key and the fits once per fit group. :func:`run_sweep` is the one entry
point of every executor (:mod:`experiments.executors`) and of the Optuna search; resume and the
parent run: :mod:`experiments.studies.parent_run`.

>>> from experiments.config import load_config
>>> [t.model for t in _order(_ensure_baseline(expand(load_config("smoke"))))][:2]
['dummy', 'ridge']
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from featurestore.overrides import ConfigError

from ..config.grid import Trial, WindowKey, expand
from ..config.models import BASELINE
from ..config.schema import ExperimentConfig
from ..config.tracks import selection_metric as track_selection_metric
from ..executors.base import Executor, Outcome
from ..tracking.child_runs import UNSEEN_OF_TAG
from ..tracking.redact import mask_all
from .parent_run import ParentRun, RunOptions, SweepResult
from .search import run_search

#: names outside code imports from here (defined in the modules above)
__all__ = ["UNSEEN_OF_TAG", "SweepResult", "grid_trials", "run_sweep", "selection_metric"]


def selection_metric(cfg: ExperimentConfig, track: str = "personalized") -> str:
    """The metric ``track``'s configurations are ranked by: the config's metric under the track's
    averaging on validation (or LOSO)."""
    return track_selection_metric(track, cfg.protocol, cfg.metric)


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
    baselines = [
        replace(
            t0,
            model=BASELINE,
            model_params=(),
            personalization="global",
            smooth_s=0.0,
            rescale="none",
        )
        for target, t0 in firsts.items()
        if target not in have
    ]
    return [*baselines, *trials]


def _fixed_unseen(cfg: ExperimentConfig, trials: Sequence[Trial], run: ParentRun) -> list[Trial]:
    """``unseen_listener: {selection: fixed, configuration: X}``: the grid's configuration whose
    label or config hash is X, scored on left-out listeners (unless already done)."""
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
    when it has none, and under nested unseen-listener selection every generalized
    configuration marked to be fitted without each listener in turn.

    Raises:
        ConfigError: nested unseen-listener selection under a protocol other than ``val`` or ``loso``.
    """
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


def run_sweep(
    cfg: ExperimentConfig,
    store: Any = "features",
    *,
    executor: str | Executor | None = None,
    scheduler: str | None = None,
    tracking_uri: str | None = None,
    jobs: int | None = None,
    progress: bool = True,
    run_name: str | None = None,
    log_artifacts: bool = True,
    on_result: Callable[[dict], None] | None = None,
    resume: bool = True,
) -> SweepResult:
    """Run every configuration of ``cfg`` (its grid, or its Optuna search: :func:`run_search`) and log
    them to MLflow; ``executor``: a registered executor's name or an
    :class:`~experiments.executors.base.Executor` (default: the config's), joining the cluster at
    ``scheduler``; a configuration with a FINISHED run of its hash on the same store by the same
    code is reused unless ``resume`` is False; the rest: :class:`~.parent_run.RunOptions`. Returns
    a :class:`SweepResult` (``table``: a row per configuration with its run id, status, params and
    metrics).

    Raises:
        ConfigError: an unknown executor, or an unusable unseen-listener selection.
    """
    options = RunOptions(
        tracking_uri,
        jobs,
        progress,
        run_name,
        log_artifacts,
        on_result,
        executor,
        scheduler,
        resume,
    )
    if cfg.search.method == "optuna":
        return run_search(cfg, store, **vars(options))
    trials = grid_trials(cfg)
    run = ParentRun(cfg, store, options)
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

        run.evaluate(todo, record)
        if cfg.unseen_listener and cfg.unseen_selection != "nested":
            extra = (
                _fixed_unseen(cfg, trials, run)
                if cfg.unseen_selection == "fixed"
                else run.unseen_listener_todo(trials)
            )
            if extra:
                run.bar.total += len(extra)
                run.bar.set_description("unseen listeners")
                run.evaluate(extra, record)
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
