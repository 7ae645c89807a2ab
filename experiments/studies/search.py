"""Optuna search beside the grid: the same configurations, child runs and summary, sampled.

A config with ``search: {method: optuna, n_trials: N, sampler: tpe, seed: S, track: T}``
(see :class:`experiments.config.schema.SearchConfig`) is a search space instead of a grid
(:mod:`experiments.config.search_space`): every list stays a set of categorical choices and an axis
or hyperparameter may be a range (:class:`experiments.config.schema.Range`)::

    search: {method: optuna, n_trials: 40, sampler: tpe, seed: 0, track: generalized}
    window: {lengths_s: [[4], [2, 8]], delay_s: {low: 0, high: 4}}
    models:
      - {name: linear_svr, C: {low: 0.001, high: 10, log: true}}
      - {name: xgboost, max_depth: {low: 2, high: 8, int: true}, learning_rate: {low: 0.01, high: 0.3, log: true}}

**Objective.** The validation CCC of the configured track under its own averaging
(``val.ccc_<track>``, or ``loso.ccc_<track>`` under protocol loso:
:func:`experiments.config.tracks.selection_metric`), never a test metric. The personalization and
rescaling choices are those the track chooses among (the tracks nest): a generalized search
never proposes a configuration that knows who is listening, a personalized search may propose
any (:func:`experiments.config.search_space.search_space`).

**Trials are child runs.** Each trial becomes an :class:`experiments.config.grid.Trial`, evaluated by
an executor (:mod:`experiments.executors`; the local one unless another is given) and logged
by :class:`experiments.studies.parent_run.ParentRun`, as a grid's configurations are: the same params
(``track`` included), metrics, artifacts and tags, plus the tags ``optuna_study`` and ``optuna_trial``, so the
ablation, the summary and the MLflow UI read a search like a grid. Optuna's own MLflow
integration (``optuna_integration.MLflowCallback``) is not used: it opens its own run per trial
through MLflow's global fluent state, names params after Optuna's parameter names and logs
only the objective, so its runs would be neither our child runs nor resumable by config hash.
The link runs the other way: each Optuna trial carries the child run's id
(user attribute ``mlflow_run_id``) and ``config_hash``.

**Parallel trials without locks.** Ask and tell happen in this process, which is also the only
MLflow writer: up to ``jobs`` sampled configurations are evaluated at a time by the local
executor's fork pool (Optuna's batch ask-and-tell; TPE's ``constant_liar`` keeps the trials in
flight apart), and each is told as soon as it is logged.

**Where the study lives, and resume.** An Optuna RDB storage: by default ``optuna.db`` beside a
SQLite tracking database (``mlruns/optuna.db`` next to ``mlruns/mlflow.db``; a file of its own
because both MLflow and Optuna keep an ``alembic_version`` table); for a tracking server or
PostgreSQL give ``search.storage`` (any SQLAlchemy URL Optuna accepts). The study is named
``<experiment>.<hash>``, the hash covering the resolved config (without ``jobs``,
``search.n_trials`` and ``search.storage``), the store fingerprint and the code fingerprint;
the parent run carries it (tag ``optuna_study``). Re-running the same config continues that
study up to ``n_trials`` trials in all: finished trials stay, a trial asked but never told by a
killed search is evaluated with its sampled parameters, and a configuration with a FINISHED
MLflow run by the same code on the same store is reused (its run and metrics), as the grid's
resume does. ``--no-resume`` starts a new study.

Example (a notebook)::

    from experiments import load_config
    from experiments.studies.search import run_search
    res = run_search(load_config("search"), store="features", jobs=2)
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from featurestore.overrides import ConfigError
from featurestore.processes import pid_alive

from ..config.grid import Trial
from ..config.metrics import get_metric
from ..config.schema import ExperimentConfig, config_hash
from ..config.search_space import SearchSpace, baseline_trial, sample_trial, search_space
from ..config.tracks import selection_metric
from ..executors.base import Outcome
from ..tracking.child_runs import RunRow
from .parent_run import ParentRun, RunOptions, SweepResult

#: tags of a search's child runs and parent run
STUDY_TAG = "optuna_study"
TRIAL_TAG = "optuna_trial"


# --------------------------------------------------------------------------- the study
def default_storage(tracking_uri: str) -> str:
    """The Optuna storage beside a SQLite tracking database: ``sqlite:///<folder>/optuna.db``.

    Raises:
        ConfigError: the tracking URI is not a SQLite file (a server, PostgreSQL): then the
            config must name the storage (``search.storage``).
    """
    if tracking_uri.startswith("sqlite:///"):
        return f"sqlite:///{Path(tracking_uri[len('sqlite:///') :]).with_name('optuna.db')}"
    raise ConfigError(
        f"tracking URI {tracking_uri} is not a SQLite file: say where the Optuna study lives with "
        "search.storage, e.g. --set search.storage=postgresql://USER@DBHOST/optuna "
        "(a database of its own) or sqlite:///mlruns/optuna.db on a local disk"
    )


def storage_url(storage: str) -> str:
    """``search.storage`` as a SQLAlchemy URL: a plain path is a SQLite file (a folder gets
    ``optuna.db``), created relative to the working directory; URLs are returned unchanged."""
    if "://" in storage:
        return storage
    path = Path(storage)
    if path.suffix != ".db":
        path = path / "optuna.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


def study_name(cfg: ExperimentConfig, store_fingerprint: str, code_fingerprint: str) -> str:
    """``<experiment>.<hash>``: the hash covers the resolved config without what does not change
    the study (``jobs``, ``search.n_trials``, ``search.storage``), the store's and the code's
    fingerprints, so the same search on the same data by the same code continues one study."""
    d = cfg.to_dict()
    d.pop("jobs", None)
    d["search"] = {k: v for k, v in d["search"].items() if k not in ("n_trials", "storage")}
    key = {"config": d, "store": store_fingerprint, "code": code_fingerprint}
    return f"{cfg.tracking.experiment}.{config_hash(key)}"


def _public_url(url: str) -> str:
    """``url`` without its password (for tags and messages)."""
    try:
        # third-party, loaded with optuna: only when a search runs
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a SQLAlchemy URL: show nothing of it but its scheme
        return url.split("://", 1)[0] + "://..."


def _sampler(cfg: ExperimentConfig, space: SearchSpace):
    import optuna  # heavy (SQLAlchemy, alembic): imported when a search runs, not with this module

    class AskTellGridSampler(optuna.samplers.GridSampler):
        """Optuna's GridSampler without its ``study.stop()`` after the last grid point, which raises
        outside ``study.optimize`` (ask-and-tell; optuna/optuna#5141): :func:`run_search` stops
        itself, at ``n_trials`` capped to the grid's size."""

        def after_trial(self, study, trial, state, values) -> None:
            return None

    s = cfg.search
    if s.sampler == "grid":
        return AskTellGridSampler(space.grid(), seed=s.seed)
    if s.sampler == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    # constant_liar: trials in flight count as bad results, so a batch of jobs samples apart
    return optuna.samplers.TPESampler(
        seed=s.seed, n_startup_trials=s.startup_trials, constant_liar=True
    )


def open_study(cfg: ExperimentConfig, name: str, storage: str):
    """Create or load the study ``name`` in the RDB ``storage``, the direction the config's
    metric's (higher or lower is better)."""
    import optuna  # heavy (SQLAlchemy, alembic): imported when a search runs, not with this module

    optuna.logging.set_verbosity(
        optuna.logging.WARNING
    )  # the sweep's progress bar says what happens
    kwargs = {"connect_args": {"timeout": 60}} if storage.startswith("sqlite") else {}
    rdb = optuna.storages.RDBStorage(storage, engine_kwargs=kwargs)
    return optuna.create_study(
        study_name=name,
        storage=rdb,
        sampler=_sampler(cfg, search_space(cfg)),
        direction=get_metric(cfg.metric).direction,
        load_if_exists=True,
    )


def _owned_elsewhere(t) -> bool:
    """Whether a RUNNING trial belongs to a search still running (another live process on this
    host, or another host): it is then left alone."""
    host, pid = t.user_attrs.get("host"), int(t.user_attrs.get("pid", 0) or 0)
    if host not in (None, socket.gethostname()):
        return True
    return bool(pid) and pid != os.getpid() and pid_alive(pid)


@dataclass
class SearchResult(SweepResult):
    """A :class:`experiments.studies.parent_run.SweepResult` plus the study: its name, its storage (without
    password) and its trials table (``study.trials_dataframe()``: number, params, value, state)."""

    study_name: str = ""
    storage: str = ""
    trials: pd.DataFrame = field(default_factory=pd.DataFrame)


class _SearchRun(ParentRun):
    """The parent run of a search: the sweep's, plus the study's trials table in its summary."""

    study: Any = None

    def summarise(self, table: pd.DataFrame) -> dict[str, str]:
        best_ids = super().summarise(table)
        with contextlib.suppress(Exception):  # best effort while ending, possibly on an error
            trials_table = self.study.trials_dataframe()
            self.tracker.log(
                self.id,
                metrics={
                    "n_trials": len(trials_table),
                    "n_trials_complete": int((trials_table.get("state") == "COMPLETE").sum()),
                },
            )
            with tempfile.TemporaryDirectory() as tmp:
                trials_table.to_csv(Path(tmp) / "optuna_trials.csv", index=False)
                self.tracker.log_artifacts(self.id, tmp)
        return best_ids


def _n_trials(cfg: ExperimentConfig, space: SearchSpace) -> int:
    """The trials a search runs: ``search.n_trials``, and with the ``grid`` sampler at most
    the size of its grid (GridSampler walks it once)."""
    if cfg.search.sampler != "grid":
        return cfg.search.n_trials
    return min(cfg.search.n_trials, int(np.prod([len(v) for v in space.grid().values()])))


def _check_search(cfg: ExperimentConfig) -> None:
    """Raise a ConfigError unless ``cfg`` is an Optuna search whose ``unseen_listener`` is off
    or ``chosen`` (a search cannot choose a configuration without a listener)."""
    if cfg.search.method != "optuna":
        raise ConfigError(
            f"{cfg.source}: search.method is {cfg.search.method!r}; run_search runs an Optuna search "
            "(search.method: optuna); a grid runs with experiments.studies.sweep.run_sweep"
        )
    if cfg.unseen_listener and cfg.unseen_selection != "chosen":
        raise ConfigError(
            f"{cfg.source}: unseen_listener selection {cfg.unseen_selection} is not possible in an "
            "Optuna search (its trials are proposed from every listener's validation scores); set "
            "unseen_listener false, or {selection: chosen} for the search's choice refitted without "
            "each listener (not a score for a person never seen, and marked so)"
        )


def run_search(cfg: ExperimentConfig, store="features", **options: Any) -> SearchResult:
    """Run ``cfg``'s Optuna search (``search.method: optuna``) and log every trial to MLflow.

    Same keyword arguments (:class:`experiments.studies.parent_run.RunOptions`), parent run, child runs
    and summary as :func:`experiments.studies.sweep.run_sweep`; the parent is tagged ``search=optuna``
    and ``optuna_study``. ``jobs`` configurations are evaluated at a time (default: the
    config's ``jobs``, else 1), by the local executor unless ``executor`` names another.
    Returns a :class:`SearchResult` (the sweep's fields, plus the study).

    Raises:
        ConfigError: not an Optuna search, or ``unseen_listener`` on with a selection other
            than ``chosen`` (a search cannot choose without a listener).
    """
    _check_search(cfg)
    try:
        import optuna  # heavy (SQLAlchemy, alembic): imported when a search runs, not with this module
        from optuna.trial import TrialState
    except ImportError as e:  # pragma: no cover - optuna is in install_requires
        raise ConfigError(
            "search.method optuna needs the optuna package: pip install 'optuna>=3.6'"
        ) from e
    space = search_space(cfg)
    run = _SearchRun(cfg, store, RunOptions(**options))
    track = cfg.search.track
    metric = selection_metric(track, cfg.protocol, cfg.metric)
    storage = (
        storage_url(cfg.search.storage) if cfg.search.storage else default_storage(run.tracker.uri)
    )
    name = study_name(cfg, run.fingerprint, run.code.fingerprint) + (
        "" if run.options.resume else time.strftime(".rerun-%Y%m%d-%H%M%S")
    )
    study = run.study = open_study(cfg, name, storage)
    n_trials = _n_trials(cfg, space)
    run.start(
        "search",
        tags={"search": "optuna", STUDY_TAG: name, "optuna_storage": _public_url(storage)},
        params={
            "n_trials": n_trials,
            "search.sampler": cfg.search.sampler,
            "search.seed": cfg.search.seed,
            "search.track": track,
            "search.objective": metric,
        },
        child_tags={STUDY_TAG: name},
        progress={"total": n_trials, "desc": f"optuna {track}", "unit": "trial"},
    )
    known: dict[str, RunRow] = {}  # config hash -> its row in this search
    trials: dict[str, Trial] = {}  # config hash -> configuration, every one this search met

    def known_row(t: Trial) -> RunRow | None:
        """The row of a configuration this search has, or one reused from a finished run."""
        h = t.hash()
        if h not in known and (row := run.reused(t)) is not None:
            known[h] = row
        return known.get(h)

    def tell(number: int, row: RunRow) -> None:
        value = row.metrics.get(metric, np.nan) if not row.failed else np.nan
        ok = value is not None and np.isfinite(value)
        study.tell(
            number,
            float(value) if ok else None,
            state=TrialState.COMPLETE if ok else TrialState.FAIL,
        )

    def evaluate(
        todo: dict[str, Trial], numbers: dict[str, list[int]], opened: dict[int, Any]
    ) -> None:
        """Evaluate ``todo`` (hash -> configuration), log each, tell the trials waiting on it."""

        def record(outcome: Outcome) -> None:
            h = outcome.trial.hash()
            waiting = numbers.get(h, [])
            row = known[h] = run.record(
                outcome, tags={TRIAL_TAG: ",".join(map(str, waiting))} if waiting else None
            )
            for number in waiting:
                opened[number].set_user_attr("mlflow_run_id", row.run_id)
                tell(number, row)
            run.bar.update(len(waiting))
            run.notify(row)

        run.evaluate(list(todo.values()), record)

    def n_told() -> int:
        return sum(
            t.state in (TrialState.COMPLETE, TrialState.FAIL)
            for t in study.get_trials(deepcopy=False)
        )

    with run.closing():
        # trials asked but never told by a killed search: evaluated now, with their sampled parameters
        stale = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if not _owned_elsewhere(t)
        ]
        told = n_told()
        run.bar.update(min(told, n_trials))
        base = baseline_trial(space, cfg)
        trials[base.hash()] = base
        todo: dict[str, Trial] = (
            {} if known_row(base) is not None else {base.hash(): base}
        )  # the baseline first
        while True:
            numbers: dict[str, list[int]] = {}  # config hash -> the trials waiting for it
            opened: dict[int, Any] = {}
            pending = 0
            while len(todo) < run.jobs + (base.hash() in todo) and (
                stale or told + pending < n_trials
            ):
                # a stale trial is the stored one: its suggest_* calls return the parameters it was given
                ot = optuna.trial.Trial(study, stale.pop(0)._trial_id) if stale else study.ask()
                ot.set_user_attr("host", socket.gethostname())
                ot.set_user_attr("pid", os.getpid())
                t = sample_trial(space, cfg, ot)
                ot.set_user_attr("config_hash", t.hash())
                trials.setdefault(t.hash(), t)
                opened[ot.number] = ot
                row = known_row(t)
                if row is not None:  # sampled again, or finished by an earlier run of the same code
                    ot.set_user_attr("mlflow_run_id", row.run_id)
                    tell(ot.number, row)
                    told += 1
                    run.bar.update(1)
                    continue
                todo.setdefault(t.hash(), t)
                numbers.setdefault(t.hash(), []).append(ot.number)
                pending += 1
            if not todo:
                break
            evaluate(todo, numbers, opened)
            told += pending
            todo = {}
        if cfg.unseen_listener and track == "generalized":
            # each feature set's chosen configuration, again, on listeners left out of training
            run.bar.set_description("unseen listeners")
            evaluate({t.hash(): t for t in run.unseen_listener_todo(list(trials.values()))}, {}, {})
    result = run.result(
        skipped=sum(r.status == "reused" for r in run.rows),
        cls=SearchResult,
        study_name=name,
        storage=_public_url(storage),
        trials=study.trials_dataframe(),
    )
    assert isinstance(result, SearchResult)  # what cls= builds
    return result


def trial_sequence(study) -> list[dict[str, Any]]:
    """The parameters of a study's trials in trial order (what the sampler proposed)."""
    return [
        dict(t.params) for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    ]
