"""An Optuna search over a config's search space (``search: {method: optuna, ...}``): the same
configurations, child runs and summary as a grid's, sampled (docs/config.md, Optuna search),
by batch ask-and-tell, evaluated ``jobs`` at a time by the sweep. Optuna's own MLflow callback is
not used: its runs would be neither these child runs nor resumable by config hash; each trial
carries its child run's id (user attribute ``mlflow_run_id``) instead."""

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

from featurestore import Store
from featurestore.errors import ConfigError
from featurestore.processes import pid_alive

from ..config.grid import Trial
from ..config.metrics import get_metric
from ..config.schema import ExperimentConfig, config_hash
from ..config.search_space import SearchSpace, baseline_trial, sample_trial, search_space
from ..config.tracks import selection_metric
from ..tracking.child_runs import Outcome, RunRow
from ..tracking.redact import mask_uri
from .parent_run import ParentRun, SweepOptions, SweepResult, as_store
from .sweep import evaluate

#: tags of a search's child runs and parent run
STUDY_TAG = "optuna_study"
TRIAL_TAG = "optuna_trial"


# --------------------------------------------------------------------------- the study
def study_storage(storage: str | None, tracking_uri: str) -> str:
    """``search.storage`` as a SQLAlchemy URL (a plain path is a SQLite file, a folder gets
    ``optuna.db``, created relative to the working directory), by default ``optuna.db`` beside a
    SQLite tracking database (ConfigError for another tracking URI: the config must name it)."""
    if storage and "://" in storage:
        return storage
    if storage:
        path = Path(storage)
        if path.suffix != ".db":
            path = path / "optuna.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path.resolve()}"
    if tracking_uri.startswith("sqlite:///"):
        return f"sqlite:///{Path(tracking_uri[len('sqlite:///') :]).with_name('optuna.db')}"
    raise ConfigError(
        f"tracking URI {mask_uri(tracking_uri)} is not a SQLite file: say where the Optuna study lives with "
        "search.storage, e.g. --set search.storage=postgresql://USER@DBHOST/optuna "
        "(a database of its own) or sqlite:///mlruns/optuna.db on a local disk"
    )


def study_name(cfg: ExperimentConfig, store_fingerprint: str, code_fingerprint: str) -> str:
    """``<experiment>.<hash>``: the hash covers the resolved config without what does not change
    the study (``jobs``, ``backend``, ``search.n_trials``, ``search.storage``), the store's and the code's
    fingerprints, so the same search on the same data by the same code continues one study."""
    d = cfg.to_dict()
    d.pop("jobs", None)
    d.pop("backend", None)
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


def _sampler(cfg: ExperimentConfig, space: SearchSpace) -> Any:
    import optuna  # heavy (SQLAlchemy, alembic): imported when a search runs, not with this module

    class AskTellGridSampler(optuna.samplers.GridSampler):
        """Optuna's GridSampler without its ``study.stop()`` after the last grid point, which raises
        outside ``study.optimize`` (ask-and-tell; optuna/optuna#5141): :func:`run_search` stops
        itself, at ``n_trials`` capped to the grid's size."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
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


def open_study(cfg: ExperimentConfig, name: str, storage: str) -> Any:
    """Create or load the study ``name`` in the RDB ``storage``, in the direction of the config's metric."""
    import optuna  # heavy (SQLAlchemy, alembic): imported when a search runs, not with this module

    # the sweep's progress bar says what happens
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kwargs = {"connect_args": {"timeout": 60}} if storage.startswith("sqlite") else {}
    rdb = optuna.storages.RDBStorage(storage, engine_kwargs=kwargs)
    return optuna.create_study(
        study_name=name,
        storage=rdb,
        sampler=_sampler(cfg, search_space(cfg)),
        direction=get_metric(cfg.metric).direction,
        load_if_exists=True,
    )


def _owned_elsewhere(t: Any) -> bool:
    """Whether a RUNNING trial belongs to a search still running (another live process, or host)."""
    host, pid = t.user_attrs.get("host"), int(t.user_attrs.get("pid", 0) or 0)
    if host not in (None, socket.gethostname()):
        return True
    return bool(pid) and pid != os.getpid() and pid_alive(pid)


@dataclass
class SearchResult(SweepResult):
    """A :class:`~experiments.studies.parent_run.SweepResult` plus the study's name, its storage
    (without password) and its trials table (``study.trials_dataframe()``)."""

    study_name: str = ""
    storage: str = ""
    trials: pd.DataFrame = field(default_factory=pd.DataFrame)


class _Search(ParentRun):
    """A search's parent run: the sweep's, plus the study's ask-and-tell loop (:meth:`run`)."""

    def __init__(self, cfg: ExperimentConfig, store: Store, options: SweepOptions) -> None:
        super().__init__(cfg, store, options)
        if self.backend.remote:
            raise ConfigError(
                f"{cfg.source}: an Optuna search (search.method: optuna) runs its trials on this "
                f"machine, and backend {self.backend.name} runs them elsewhere: use --backend "
                "processes --jobs N"
            )
        self.space = search_space(cfg)
        self.objective = selection_metric(cfg.search.track, cfg.protocol, cfg.metric)
        self.storage = study_storage(cfg.search.storage, self.tracker.uri)
        self.name = study_name(cfg, self.fingerprint, self.code.fingerprint) + (
            "" if options.resume else time.strftime(".rerun-%Y%m%d-%H%M%S")
        )
        self.study = open_study(cfg, self.name, self.storage)
        self.n_trials = _n_trials(cfg, self.space)
        self.known: dict[str, RunRow] = {}  # config hash -> its row in this search
        self.trials: dict[str, Trial] = {}  # config hash -> configuration, every one met

    def summarise(self, table: pd.DataFrame) -> dict[str, str]:
        """The sweep's summary, plus the trials' counts and ``optuna_trials.csv``."""
        best_ids = super().summarise(table)
        with contextlib.suppress(Exception):  # best effort while ending, possibly on an error
            trials_table = self.study.trials_dataframe()
            complete = int((trials_table.get("state") == "COMPLETE").sum())
            self.tracker.log(
                self.id, metrics={"n_trials": len(trials_table), "n_trials_complete": complete}
            )
            with tempfile.TemporaryDirectory() as tmp:
                trials_table.to_csv(Path(tmp) / "optuna_trials.csv", index=False)
                self.tracker.log_artifacts(self.id, tmp)
        return best_ids

    def known_row(self, t: Trial) -> RunRow | None:
        """The row of a configuration this search has, or one reused from a finished run."""
        h = t.hash()
        if h not in self.known and (row := self.reused(t)) is not None:
            self.known[h] = row
        return self.known.get(h)

    def tell(self, number: int, row: RunRow) -> None:
        """Tell trial ``number`` its configuration's objective (FAIL when it has none)."""
        from optuna.trial import TrialState  # heavy (SQLAlchemy): only when a search runs

        value = np.nan if row.failed else row.metrics.get(self.objective, np.nan)
        ok = value is not None and np.isfinite(value)
        state = TrialState.COMPLETE if ok else TrialState.FAIL
        self.study.tell(number, float(value) if ok else None, state=state)

    def evaluate_asked(
        self, todo: dict[str, Trial], numbers: dict[str, list[int]], asked: dict[int, Any]
    ) -> None:
        """Evaluate ``todo`` (hash -> configuration), log each, tell the trials waiting on it."""

        def record(outcome: Outcome) -> None:
            h = outcome.trial.hash()
            waiting = numbers.get(h, [])
            tags = {TRIAL_TAG: ",".join(map(str, waiting))} if waiting else None
            row = self.known[h] = self.record(outcome, tags=tags)
            for number in waiting:
                asked[number].set_user_attr("mlflow_run_id", row.run_id)
                self.tell(number, row)
            self.bar.update(len(waiting))
            self.notify(row)

        evaluate(self, list(todo.values()), record)

    def ask(self, stale: list[Any]) -> tuple[Any, Trial]:
        """The next trial (a stale one, asked but never told by a killed search, first: its
        suggestions return the parameters it was given) and its configuration."""
        import optuna  # heavy (SQLAlchemy, alembic): only when a search runs

        ot = optuna.trial.Trial(self.study, stale.pop(0)._trial_id) if stale else self.study.ask()
        ot.set_user_attr("host", socket.gethostname())
        ot.set_user_attr("pid", os.getpid())
        t = sample_trial(self.space, self.cfg, ot)
        ot.set_user_attr("config_hash", t.hash())
        self.trials.setdefault(t.hash(), t)
        return ot, t

    def run(self) -> None:
        """The baseline first, then batches of ``jobs`` sampled configurations until ``n_trials``
        are told; then, with unseen listeners, each feature set's choice without each listener."""
        from optuna.trial import TrialState  # heavy (SQLAlchemy): only when a search runs

        states = (TrialState.RUNNING,)
        stale = [t for t in self.study.get_trials(False, states=states) if not _owned_elsewhere(t)]
        done = (TrialState.COMPLETE, TrialState.FAIL)
        told = sum(t.state in done for t in self.study.get_trials(deepcopy=False))
        self.bar.update(min(told, self.n_trials))
        base = baseline_trial(self.space, self.cfg)
        self.trials[base.hash()] = base
        todo = {} if self.known_row(base) is not None else {base.hash(): base}
        while True:
            numbers: dict[str, list[int]] = {}  # config hash -> the trials waiting for it
            asked: dict[int, Any] = {}
            pending = 0
            while len(todo) < self.jobs + (base.hash() in todo) and (
                stale or told + pending < self.n_trials
            ):
                ot, t = self.ask(stale)
                asked[ot.number] = ot
                row = self.known_row(t)
                if row is not None:  # sampled again, or finished by an earlier run of the same code
                    ot.set_user_attr("mlflow_run_id", row.run_id)
                    self.tell(ot.number, row)
                    told += 1
                    self.bar.update(1)
                    continue
                todo.setdefault(t.hash(), t)
                numbers.setdefault(t.hash(), []).append(ot.number)
                pending += 1
            if not todo:
                break
            self.evaluate_asked(todo, numbers, asked)
            told, todo = told + pending, {}
        if self.cfg.unseen_listener and self.cfg.search.track == "generalized":
            self.bar.set_description("unseen listeners")
            again = self.unseen_listener_todo(list(self.trials.values()))
            self.evaluate_asked({t.hash(): t for t in again}, {}, {})


def _n_trials(cfg: ExperimentConfig, space: SearchSpace) -> int:
    """``search.n_trials``, with the ``grid`` sampler at most its grid's size (walked once)."""
    if cfg.search.sampler != "grid":
        return cfg.search.n_trials
    return min(cfg.search.n_trials, int(np.prod([len(v) for v in space.grid().values()])))


def _check_search(cfg: ExperimentConfig) -> None:
    """Raise a ConfigError unless ``cfg`` is an Optuna search whose ``unseen_listener`` is off
    or ``chosen``."""
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


def run_search(
    cfg: ExperimentConfig,
    store: Store | str | os.PathLike = "features",
    options: SweepOptions | None = None,
) -> SearchResult:
    """Run ``cfg``'s Optuna search (``search.method: optuna``) and log every trial to MLflow, as
    :func:`experiments.studies.sweep.run_sweep` logs a grid, with the same options
    (:class:`~experiments.studies.parent_run.SweepOptions`); the parent is tagged
    ``search=optuna`` and ``optuna_study``. ConfigError: not an Optuna search, a remote backend,
    or ``unseen_listener`` on with a selection other than ``chosen``."""
    _check_search(cfg)
    run = _Search(cfg, as_store(store), options or SweepOptions())
    s = cfg.search
    params = {"n_trials": run.n_trials, "search.sampler": s.sampler, "search.seed": s.seed}
    params |= {"search.track": s.track, "search.objective": run.objective}
    tags = {"search": "optuna", STUDY_TAG: run.name, "optuna_storage": _public_url(run.storage)}
    progress = {"total": run.n_trials, "desc": f"optuna {s.track}", "unit": "trial"}
    with run.opened("search", params, tags, {STUDY_TAG: run.name}, progress):
        run.run()
    result = run.result(
        skipped=sum(r.status == "reused" for r in run.rows),
        cls=SearchResult,
        study_name=run.name,
        storage=_public_url(run.storage),
        trials=run.study.trials_dataframe(),
    )
    assert isinstance(result, SearchResult)  # what cls= builds
    return result


def trial_sequence(study: Any) -> list[dict[str, Any]]:
    """The parameters of a study's trials in trial order (what the sampler proposed)."""
    return [
        dict(t.params) for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    ]
