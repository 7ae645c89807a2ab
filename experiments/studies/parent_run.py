"""A sweep's or a search's MLflow parent run, from resume to summary.

:func:`experiments.studies.sweep.run_sweep` (a grid) and :func:`experiments.studies.search.run_search` (an
Optuna study) differ in which configurations they evaluate, not in what happens around them;
:class:`ParentRun` is that common part:

1. open the tracking store, marking runs a killed sweep left RUNNING as KILLED; fingerprint
   the store (:func:`store_fingerprint`) and the code (:mod:`experiments.tracking.provenance`), and look
   up the FINISHED runs a resume reuses: a configuration with a run of the same config hash
   on a store of the same fingerprint by the same code is not run again (:meth:`ParentRun.reused`);
2. start the parent run (tags, params) and hand configurations to the executor
   (:meth:`ParentRun.evaluate`), recording each outcome as a child run as it comes
   (:meth:`ParentRun.record`, :func:`experiments.tracking.child_runs.log_child`);
3. however the sweep ends, mark its child runs still RUNNING as KILLED (their writer was
   lost), attach the summary (:func:`experiments.tracking.summary.summarise`) and close the parent
   (:meth:`ParentRun.finish`), then return a :class:`SweepResult`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from featurestore import Store

from ..config.grid import Trial
from ..config.metrics import get_metric
from ..config.options import TRACKS
from ..config.schema import ExperimentConfig
from ..config.store_check import corpus_roles
from ..config.tracks import candidates, selection_metric
from ..data.lookahead import (
    ChannelLookahead,
    channel_lookaheads,
    unknown_note,
    with_channel_lookahead,
)
from ..executors.base import Executor, Outcome, SweepContext
from ..executors.local import LocalExecutor
from ..tracking.child_runs import RunRow, log_child, run_row, sweep_table
from ..tracking.provenance import code_version
from ..tracking.summary import summarise, summarise_targets, unseen_listener_trials
from ..tracking.tracker import CONFIG_HASH_TAG, Tracker
from .unseen import nested_unseen


@dataclass
class SweepResult:
    """What a sweep did: one row per configuration, the parent run and the best child of each track.

    ``best_run_ids`` / ``selection_metrics``: per track (``personalized``, ``generalized``)
    its best child run, chosen by its own averaging on validation (or LOSO), and that metric;
    the personalized track chooses among every configuration, the generalized track among
    those that do not know who is listening (the tracks nest).
    ``best_run_id`` / ``selection_metric`` name the personalized track's (the generalized
    track's when the sweep has no personalized configuration), as before tracks existed.
    ``scores``: per-session CCC of the runs computed in this sweep, by run id.
    ``unseen_selection``: how the unseen-listener configuration was chosen (``nested``,
    ``chosen``, ``fixed``; empty when ``unseen_listener`` is off); ``nested_unseen``: under
    ``nested``, one row per left-out listener with its configuration, chosen among every
    feature set's (:func:`experiments.studies.unseen.nested_unseen`), as the summary reports it.
    """

    table: pd.DataFrame
    parent_run_id: str
    best_run_id: str | None
    experiment_id: str
    selection_metric: str
    failed: list[tuple[str, str]] = field(default_factory=list)  # (label, error)
    skipped: int = 0
    best_run_ids: dict[str, str] = field(default_factory=dict)
    selection_metrics: dict[str, str] = field(default_factory=dict)
    scores: dict[str, pd.DataFrame] = field(default_factory=dict)
    unseen_selection: str = ""
    nested_unseen: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: with several targets, target -> track -> best run id (``best_run_ids``: the first target's)
    best_run_ids_by_target: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def n_failed(self) -> int:
        return len(self.failed)


@dataclass(frozen=True)
class RunOptions:
    """How a sweep or a search runs and logs: the keyword arguments of
    :func:`experiments.studies.sweep.run_sweep`, which :func:`experiments.studies.search.run_search` and
    :func:`experiments.studies.distributed.run_sweep_dask` take too.

    Attributes:
        tracking_uri: MLflow tracking URI (default: the config's ``tracking.uri``).
        jobs: configurations evaluated at a time (default: the config's ``jobs``, else 1).
        progress: show a tqdm bar.
        run_name: the parent run's name (default: the kind of run and the time).
        log_artifacts: log each child's config, CCC matrix, predictions and plots.
        on_result: called with each new child run's table row (a dict, column -> value) as it
            is logged (not for the reused runs of earlier sweeps).
        executor: where configurations are evaluated (default: a
            :class:`experiments.executors.local.LocalExecutor`).
        resume: reuse finished runs of the same code on the same store; False runs all again.
    """

    tracking_uri: str | None = None
    jobs: int | None = None
    progress: bool = True
    run_name: str | None = None
    log_artifacts: bool = True
    on_result: Callable[[dict], None] | None = None
    executor: Executor | None = None
    resume: bool = True


def store_fingerprint(store) -> tuple[str, str]:
    """(hash of every shard's channel cache keys and labels, face backend name).

    Labels are hashed by content (they are small): re-imported or corrected ratings change the
    scores, so runs on the old labels must not be reused.
    """
    st = store if isinstance(store, Store) else Store(store)
    h = hashlib.sha256()
    backend = "none"
    for s in st.list_sessions():
        keys = st.cache_keys(s)
        targets = st.label_targets(s)
        h.update(json.dumps([s, sorted(keys.items()), targets]).encode())
        for target in targets:
            h.update(np.ascontiguousarray(st.labels(s, target).to_numpy()).tobytes())
        if backend == "none" and "listener/face_geom" in keys:
            backend = str(st.read_channel(s, "listener/face_geom").params.get("backend", "unknown"))
    return h.hexdigest()[:16], backend


class ParentRun:
    """The parent run of one sweep or search (see the module docstring).

    Constructing it opens the tracking store and fingerprints the store and the code;
    :meth:`start` starts the parent run. ``rows``, ``failed`` and ``scores`` collect what the
    configurations gave, in the order they were recorded.
    """

    def __init__(self, cfg: ExperimentConfig, store: Any, options: RunOptions) -> None:
        self.cfg = cfg
        self.store = store
        self.options = options
        self.executor = options.executor or LocalExecutor()
        self.jobs = int(options.jobs if options.jobs is not None else (cfg.jobs or 1))
        self.t_start = time.perf_counter()
        self.tracker = Tracker(options.tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
        self.reaped = self.tracker.reap_stale()
        self.fingerprint, self.backend = store_fingerprint(store)
        self.layout, self.role_names = corpus_roles(store)
        self.code = code_version()
        self.finished = (
            self.tracker.finished_by_hash(
                store_fingerprint=self.fingerprint, code_fingerprint=self.code.fingerprint
            )
            if options.resume
            else {}
        )
        self.metric = get_metric(cfg.metric)
        self.metrics_by_track = {t: selection_metric(t, cfg.protocol, cfg.metric) for t in TRACKS}
        self.rows: list[RunRow] = []
        self.failed: list[tuple[str, str]] = []  # (label, error)
        self.scores: dict[str, pd.DataFrame] = {}
        self.n_new = 0
        self.id = ""
        self.ctx: SweepContext | None = None
        self.bar: Any = None
        self.best_ids: dict[str, str] = {}  # track -> best run id, once finished
        self.best_ids_by_target: dict[str, dict[str, str]] = {}  # several targets: target -> that
        self.lookaheads: dict[str, ChannelLookahead] = {}  # role/channel -> its look-ahead here

    def start(
        self,
        kind: str,
        tags: dict[str, str],
        params: dict[str, Any],
        child_tags: dict[str, str] | None = None,
        progress: dict[str, Any] | None = None,
    ) -> str:
        """Start the parent run named ``<kind> <time>`` (or the run name of the options) with the
        common tags and params plus ``tags`` and ``params``; ``child_tags`` go on every child run,
        ``progress`` are the tqdm bar's arguments. Returns the parent's run id."""
        cfg, o = self.cfg, self.options
        self.id = self.tracker.start_run(
            o.run_name or f"{kind} {time.strftime('%Y-%m-%d %H:%M:%S')}",
            tags={
                CONFIG_HASH_TAG + "_sweep": cfg.hash(),
                "store_fingerprint": self.fingerprint,
                **self.code.tags(),
                "face_backend": self.backend,
                "resume": str(bool(o.resume)).lower(),
                "sweep": "parent",
                "executor": self.executor.name,
                "layout": self.layout,
                "role_names": json.dumps(self.role_names, sort_keys=True),
                # how unseen-listener configurations are chosen, from the start (the summary
                # repeats it): `chosen` marks numbers that read the left-out listener
                **({"unseen_selection": self.unseen_selection} if self.unseen_selection else {}),
                **tags,
            },
        )
        self.tracker.log(
            self.id,
            params={
                "target": ",".join(cfg.all_targets()),
                "protocol": cfg.protocol,
                **params,
                "feature_sets": ",".join(cfg.feature_set),
                "store": str(self.store),
                "jobs": self.jobs,
            },
        )
        if self.reaped:
            self.tracker.log(self.id, tags={"reaped_runs": ",".join(self.reaped)})
        self.ctx = SweepContext(
            cfg=cfg,
            store=self.store,
            channels=(),
            store_fingerprint=self.fingerprint,
            jobs=self.jobs,
            tracking_uri=self.tracker.uri,
            experiment=cfg.tracking.experiment,
            parent_run_id=self.id,
            log_artifacts=o.log_artifacts,
            child_tags={
                "store_fingerprint": self.fingerprint,
                **self.code.tags(),
                "face_backend": self.backend,
                **(child_tags or {}),
            },
        )
        self.bar = tqdm(**(progress or {}), disable=not o.progress)
        return self.id

    # ------------------------------------------------------------ configurations
    def counted(self, trials: Sequence[Trial]) -> list[Trial]:
        """``trials`` with the look-ahead of their channels on this store
        (:mod:`experiments.data.lookahead`; each channel scanned once per sweep), which their
        ``lookahead_s`` and ``causal`` params include; a channel whose look-ahead is not
        recorded is warned about once."""
        new = sorted({c for t in trials for c in t.channels} - set(self.lookaheads))
        if new:
            found = channel_lookaheads(self.store, new)
            self.lookaheads.update(found)
            note = unknown_note(found)
            if note:
                warnings.warn(note, stacklevel=3)
        return with_channel_lookahead(trials, self.lookaheads)

    def reused(self, trial: Trial) -> RunRow | None:
        """The row of ``trial``'s FINISHED run by the same code on the same store, added to this
        sweep's rows; None when it has none (or resume is off)."""
        old = self.finished.get(trial.hash())
        if old is None:
            return None
        [trial] = self.counted([trial])
        row = run_row(trial, old, "reused")
        self._add(row)
        return row

    @property
    def context(self) -> SweepContext:
        """The open sweep's :class:`SweepContext` (set when the parent run starts)."""
        if self.ctx is None:
            raise RuntimeError("the parent run is not open: enter it (`with ParentRun(...)`) first")
        return self.ctx

    def evaluate(self, todo: Sequence[Trial], on_outcome: Callable[[Outcome], None]) -> None:
        """Evaluate ``todo`` with the executor and hand each :class:`Outcome` to ``on_outcome``
        as it comes; the executor's work stops however this ends."""
        targets = list(dict.fromkeys(t.target for t in todo))
        for target in targets:  # the executor loads one target's labels at a time
            part = self.counted([t for t in todo if t.target == target])
            ctx = replace(
                self.context,
                cfg=self.cfg.for_target(target) if len(targets) > 1 else self.cfg,
                channels=tuple(sorted({c for t in part for c in t.channels})),
            )
            with contextlib.closing(self.executor.run(part, ctx)) as outcomes:
                for outcome in outcomes:
                    on_outcome(outcome)

    def record(self, outcome: Outcome, tags: dict[str, str] | None = None) -> RunRow:
        """Log an outcome as a child run with ``tags`` besides the usual ones (the row of a run its
        worker logged is taken as it is), add its row and return it; :meth:`notify` then tells
        the caller's ``on_result``."""
        ctx = self.context
        if outcome.trial.named_target:  # a sweep of several targets: each child names its own
            tags = {"target": outcome.trial.target, **(tags or {})}
        if tags:
            ctx = replace(ctx, child_tags={**ctx.child_tags, **tags})
        row = outcome.row
        if row is None:
            row = log_child(self.tracker, ctx, outcome.trial, outcome.result, outcome.error)
        if outcome.result is not None and not row.failed:
            self.scores[row.run_id] = outcome.result.scores
        self.n_new += 1
        self._add(row)
        return row

    def notify(self, row: RunRow) -> None:
        """Hand a new child run's row (as the table has it) to the ``on_result`` of the options,
        once the sweep's own bookkeeping of it is done (``on_result`` may raise, e.g. to
        interrupt the sweep)."""
        if self.options.on_result:
            self.options.on_result(row.to_dict())

    def _add(self, row: RunRow) -> None:
        """Add a configuration's row (new or reused); the progress bar shows each track's best so far
        (the tracks nest: the personalized track's best is over every configuration)."""
        if row.failed:
            self.failed.append((row.label, row.error))
        self.rows.append(row)
        best = {}
        for track, name in self.metrics_by_track.items():
            values = [
                r.metrics.get(name, np.nan)
                for r in self.rows
                if not r.failed and r.track in candidates(track)
            ]
            best[track] = (
                values[self.metric.best_index(values)] if np.isfinite(values).any() else np.nan
            )
        self.bar.set_postfix_str(
            f"best {self.cfg.protocol} pers={best['personalized']:.3f} gen={best['generalized']:.3f} "
            f"failed={len(self.failed)}"
        )

    def unseen_listener_todo(self, trials: Sequence[Trial]) -> list[Trial]:
        """Each feature set's chosen generalized configuration with the unseen-listener protocol on
        (:func:`experiments.tracking.summary.unseen_listener_trials`), chosen on validation first so the
        costly protocol runs once per set; those with a finished run are reused here, the
        others returned to be evaluated."""
        return [
            t
            for t in unseen_listener_trials(sweep_table(self.rows), trials, self.cfg.protocol)
            if self.reused(t) is None
        ]

    # ------------------------------------------------------------ the end
    @contextlib.contextmanager
    def closing(self) -> Iterator[None]:
        """Run the body, then :meth:`finish` the parent however it ended: FINISHED, KILLED on
        Ctrl-C (re-raised), FAILED on an error (re-raised); ``best_ids`` holds the result."""
        status = "FAILED"
        try:
            yield
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            self.best_ids = self.finish(status)

    def finish(self, status: str) -> dict[str, str]:
        """Close the bar, mark lost children, attach the summary (:meth:`summarise`) and close the
        parent with ``status``; returns track -> best run id."""
        if self.bar is not None:
            self.bar.close()
        self._reap_lost_children()
        best_ids = self.summarise(sweep_table(self.rows))
        self.tracker.finish(self.id, status)
        return best_ids

    @property
    def unseen_selection(self) -> str:
        """How the unseen-listener configuration is chosen; empty when the protocol is off."""
        return self.cfg.unseen_selection if self.cfg.unseen_listener else ""

    def nested_unseen(self, table: pd.DataFrame) -> pd.DataFrame:
        """Under nested selection, each left-out listener's configuration chosen among every
        feature set's (the sweep's generalized track); else an empty table."""
        if self.unseen_selection != "nested":
            return nested_unseen(table.iloc[0:0])
        return nested_unseen(table, self.cfg.protocol, False, self.cfg.metric)

    def summarise(self, table: pd.DataFrame) -> dict[str, str]:
        """Tag the parent with each track's best child and attach the summary tables; with several
        targets, per target and combined (:func:`experiments.tracking.summary.summarise_targets`),
        returning the first target's best children."""
        targets = self.cfg.all_targets()
        if len(targets) > 1:
            self.best_ids_by_target = summarise_targets(
                self.tracker,
                self.id,
                table,
                self.cfg.protocol,
                targets,
                time.perf_counter() - self.t_start,
                self.n_new,
                self.unseen_selection,
                {
                    t: self.nested_unseen(
                        table[table["target"] == t] if "target" in table else table
                    )
                    for t in targets
                },
            )
            return self.best_ids_by_target.get(targets[0], {})
        return summarise(
            self.tracker,
            self.id,
            table,
            self.cfg.protocol,
            time.perf_counter() - self.t_start,
            self.n_new,
            self.unseen_selection,
            self.nested_unseen(table),
            layout=self.layout,
            keep=list(self.cfg.feature_sets),
        )

    def _reap_lost_children(self) -> list[str]:
        """Mark this sweep's child runs still RUNNING as KILLED (their writer was lost; see
        :meth:`Tracker.reap_children`) and list them on the parent (tag ``lost_runs``).

        Best effort: it runs while the sweep ends, possibly on an error, which it must not hide.
        """
        finished = {r.config_hash: r.run_id for r in self.rows if r.status == "done"}
        try:
            lost = self.tracker.reap_children(self.id, finished)
            if lost:
                self.tracker.log(self.id, tags={"lost_runs": ",".join(lost)})
        except Exception as e:  # noqa: BLE001 - e.g. the tracking server is gone too
            warnings.warn(
                f"could not check the child runs of {self.id} for lost workers: {type(e).__name__}: {e}",
                stacklevel=3,
            )
            return []
        return lost

    def result(
        self, skipped: int, cls: type[SweepResult] = SweepResult, **extra: Any
    ) -> SweepResult:
        """The :class:`SweepResult` (or ``cls``, with ``extra`` fields) of the finished sweep."""
        best_ids = self.best_ids
        main = (
            "personalized"
            if "personalized" in best_ids or "generalized" not in best_ids
            else "generalized"
        )
        table = sweep_table(self.rows)
        return cls(
            table,
            self.id,
            best_ids.get(main),
            self.tracker.experiment_id,
            self.metrics_by_track[main],
            self.failed,
            skipped=skipped,
            best_run_ids=best_ids,
            selection_metrics=self.metrics_by_track,
            scores=self.scores,
            unseen_selection=self.unseen_selection,
            nested_unseen=self.nested_unseen(table),
            best_run_ids_by_target=self.best_ids_by_target,
            **extra,
        )
