"""A sweep's or a search's MLflow parent run, from resume to summary (:class:`ParentRun`): a grid
(:func:`experiments.studies.sweep.run_sweep`) and an Optuna study
(:func:`experiments.studies.search.run_search`) differ in which configurations they evaluate, not
in what happens around them (docs/design.md#mlflow-runs; concurrent sweeps' claims:
:mod:`experiments.tracking.claims`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from featurestore import Store
from featurestore.errors import ConfigError
from featurestore.parallel import Backend, BackendError, make_backend
from featurestore.storage.layouts import DEFAULT_LAYOUT, CorpusLayout

from ..config.grid import Trial
from ..config.metrics import DEFAULT_METRIC, get_metric
from ..config.options import TRACKS
from ..config.schema import ExperimentConfig
from ..config.store_check import corpus_layout
from ..config.tracks import candidates, selection_metric
from ..data.dataset import sessions_labelled
from ..data.lookahead import (
    ChannelLookahead,
    channel_lookaheads,
    unknown_note,
    with_channel_lookahead,
)
from ..tracking.child_runs import Outcome, RunRow, log_child, run_row, sweep_table
from ..tracking.claims import Claims
from ..tracking.context import SweepContext
from ..tracking.provenance import code_version
from ..tracking.summary import summarise, summarise_targets, unseen_listener_trials
from ..tracking.tracker import CONFIG_HASH_TAG, Tracker
from .corpus_config import corpus_note, person_ids
from .unseen import nested_unseen

#: how often (seconds) a sweep looks whether the configurations another sweep claimed are done
CLAIM_POLL_S = 2.0


@dataclass
class SweepResult:
    """What a sweep did: a ``table`` row per configuration, the parent run, per track its best child
    (``best_run_ids``) and the metric it was chosen by (``selection_metrics``; ``best_run_id`` and
    ``selection_metric``: the personalized track's, else the generalized's), per-session ``scores``
    by run id, the unseen-listener choices, with several targets target -> track -> best run id, and
    target -> the sessions left out without its labels (``without_labels``)."""

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
    best_run_ids_by_target: dict[str, dict[str, str]] = field(default_factory=dict)
    metric: str = DEFAULT_METRIC
    #: the store's corpus layout and the names (feature sets) its words leave alone
    layout: CorpusLayout = DEFAULT_LAYOUT
    keep: list[str] = field(default_factory=list)
    without_labels: dict[str, list[str]] = field(default_factory=dict)

    @property
    def n_failed(self) -> int:
        """How many configurations failed."""
        return len(self.failed)


@dataclass(frozen=True, kw_only=True)
class SweepOptions:
    """How a sweep or a search runs and logs, from the command line to the backend:
    ``tracking_uri`` (default: the config's), ``jobs`` at a time (default: the config's, else 1;
    a local Dask cluster's workers, 2), a ``progress`` bar, the parent's ``run_name``, whether to
    ``log_artifacts``, ``on_result`` (called with each new child's table row), the ``backend``
    (a registered name or a :class:`~featurestore.parallel.Backend`; default the config's), the
    cluster it joins (``scheduler``), and ``resume``."""

    tracking_uri: str | None = None
    jobs: int | None = None
    progress: bool = True
    run_name: str | None = None
    log_artifacts: bool = True
    on_result: Callable[[dict], None] | None = None
    backend: str | Backend | None = None
    scheduler: str | None = None
    resume: bool = True


def as_store(store: Store | str | os.PathLike) -> Store:
    """``store`` itself, or the store in that folder (the one coercion at a sweep's entry)."""
    return store if isinstance(store, Store) else Store(store)


def store_fingerprint(store: Store | str | os.PathLike) -> tuple[str, str]:
    """(hash of every shard's channel cache keys and labels, face backend name); labels are hashed
    by content, so re-imported or corrected ratings are not reused."""
    st = as_store(store)
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


def without_labels(cfg: ExperimentConfig, store: Store) -> dict[str, list[str]]:
    """Target -> the sessions of ``cfg``'s splits without its labels (or with only NaN ones), a
    blind test's: a sweep neither trains nor scores them. ConfigError when every session of the
    training split (under protocol val, of the validation split) is one."""
    out = {}
    for target in cfg.all_targets():
        found = sessions_labelled(store, target, cfg.splits)
        for split, need in (("train", "train"), ("val", "choose")):
            if split == "val" and cfg.protocol != "val":
                continue
            have = [ok for name, ok in found.values() if name == split]
            if have and not any(have):
                raise ConfigError(
                    f"{cfg.source}: none of the {len(have)} sessions of split {split} in "
                    f"{store.root} has labels {target!r} (or only NaN ones), so there is nothing "
                    f"to {need} on; add their ratings (`featurestore labels ANNOTATION_DIR "
                    f"--target {target}`, or a manifest's label_{target}), or give splits.{split} "
                    "stories with labels"
                )
        if left := [s for s, (_, ok) in found.items() if not ok]:
            out[target] = left
    return out


def without_labels_tags(left: dict[str, list[str]]) -> dict[str, str]:
    """The parent's tags ``sessions_without_labels`` (how many sessions were left out) and
    ``sessions_without_labels_names`` (which; with several targets, per target), none when none."""
    if not left:
        return {}
    one = len(left) == 1
    names = "; ".join(("" if one else f"{t}: ") + ", ".join(ss) for t, ss in left.items())
    n = len({s for ss in left.values() for s in ss})
    return {"sessions_without_labels": str(n), "sessions_without_labels_names": names[:5000]}


class ParentRun:
    """The parent run of one sweep or search; ``rows``, ``failed`` and ``scores`` collect what the
    configurations gave, in the order they were recorded."""

    def __init__(self, cfg: ExperimentConfig, store: Store, options: SweepOptions) -> None:
        self.cfg, self.store, self.options = cfg, store, options
        try:
            self.backend = make_backend(options.backend or cfg.backend, options.scheduler)
        except BackendError as e:
            raise ConfigError(f"{e} (config key backend, or --backend)") from None
        self.jobs = 1
        self.t_start = time.perf_counter()
        self.tracker = Tracker(
            options.tracking_uri or cfg.tracking.uri,
            cfg.tracking.experiment,
            cfg.tracking.artifacts,
        )
        self.reaped = self.tracker.reap_stale()
        self.fingerprint, self.face_backend = store_fingerprint(store)
        self.without_labels = without_labels(cfg, store)
        self.layout = corpus_layout(store)
        self.corpus_note = corpus_note(store)[1]  # reports' note on the corpus's words
        self.persons = person_ids(store)  # and its person ids
        self.code = code_version()
        finished = self.tracker.finished_by_hash
        self.finished = finished(self.fingerprint, self.code.fingerprint) if options.resume else {}
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
        self.claims = Claims(self.tracker.uri, self.tracker.experiment_id)
        self.started_ms = int(time.time() * 1000)

    @contextlib.contextmanager
    def opened(
        self,
        kind: str,
        params: dict[str, Any],
        tags: dict[str, str] | None = None,
        child_tags: dict[str, str] | None = None,
        progress: dict[str, Any] | None = None,
    ) -> Iterator[ParentRun]:
        """For the body: the backend opened and the parent run ``<kind> <time>`` (or the options'
        run name) started with the common tags and params plus ``tags`` and ``params``
        (``child_tags`` go on every child, ``progress`` are the tqdm bar's arguments); then the
        parent finished however the body ended: FINISHED, KILLED on Ctrl-C, FAILED on an error
        (both re-raised), ``best_ids`` holding each track's best child."""
        cfg, o = self.cfg, self.options
        with (
            contextlib.closing(self.claims) as _,
            self.backend.opened(o.jobs if o.jobs is not None else cfg.jobs) as self.jobs,
        ):
            name = o.run_name or f"{kind} {time.strftime('%Y-%m-%d %H:%M:%S')}"
            self.id = self.tracker.start_run(name, tags={**self._tags(), **(tags or {})})
            common = {"target": ",".join(cfg.all_targets()), "protocol": cfg.protocol}
            rest = {"feature_sets": ",".join(cfg.feature_set), "store": str(self.store.root)}
            self.tracker.log(self.id, params={**common, **params, **rest, "jobs": self.jobs})
            if self.reaped:
                self.tracker.log(self.id, tags={"reaped_runs": ",".join(self.reaped)})
            provenance = {"store_fingerprint": self.fingerprint, **self.code.tags()}
            self.ctx = SweepContext(
                cfg=cfg,
                tracking_uri=self.tracker.uri,
                experiment=cfg.tracking.experiment,
                parent_run_id=self.id,
                log_artifacts=o.log_artifacts,
                child_tags={**provenance, "face_backend": self.face_backend, **(child_tags or {})},
            )
            self.bar = tqdm(**(progress or {}), disable=not o.progress)
            status = "FAILED"
            try:
                yield self
                status = "FINISHED"
            except KeyboardInterrupt:
                status = "KILLED"
                raise
            finally:
                self.best_ids = self.finish(status)

    def _tags(self) -> dict[str, str]:
        """The parent's common tags (the unseen-listener selection from the start: ``chosen`` marks
        numbers that read the left-out listener)."""
        return {
            CONFIG_HASH_TAG + "_sweep": self.cfg.hash(),
            "store_fingerprint": self.fingerprint,
            **self.code.tags(),
            "face_backend": self.face_backend,
            "resume": str(bool(self.options.resume)).lower(),
            "sweep": "parent",
            "backend": self.backend.name,
            "layout": self.layout.name,
            "role_names": self.layout.role_names_json(),
            **({"unseen_selection": self.unseen_selection} if self.unseen_selection else {}),
            **without_labels_tags(self.without_labels),
        }

    # ------------------------------------------------------------ configurations
    def counted(self, trials: Sequence[Trial]) -> list[Trial]:
        """``trials`` with their channels' look-ahead on this store (each channel scanned once)."""
        new = sorted({c for t in trials for c in t.channels} - set(self.lookaheads))
        if new:
            found = channel_lookaheads(self.store, new)
            self.lookaheads.update(found)
            if note := unknown_note(found):
                warnings.warn(note, stacklevel=3)
        return with_channel_lookahead(trials, self.lookaheads)

    def reused(self, trial: Trial) -> RunRow | None:
        """The row of ``trial``'s FINISHED run by this code on this store, added to the rows; else None."""
        old = self.finished.get(trial.hash())
        if old is None:
            return None
        [trial] = self.counted([trial])
        row = run_row(trial, old, "reused")
        self._add(row)
        return row

    @property
    def context(self) -> SweepContext:
        """The open sweep's :class:`SweepContext`."""
        if self.ctx is None:
            raise RuntimeError("the parent run is not open: use `with run.opened(...)` first")
        return self.ctx

    def claim(
        self, trials: Sequence[Trial]
    ) -> tuple[list[Trial], list[tuple[Trial, RunRow]], list[Trial]]:
        """Claim ``trials``: returns (those to evaluate here, the rows to reuse of those another
        sweep finished meanwhile or, with resume on, earlier, those another live sweep holds)."""
        got = self.claims.take(t.hash() for t in trials)
        if not got:
            return [], [], list(trials)
        done = self.tracker.finished_by_hash(self.fingerprint, self.code.fingerprint)
        mine: list[Trial] = []
        reused: list[tuple[Trial, RunRow]] = []
        waiting: list[Trial] = []
        for t in trials:
            h = t.hash()
            old = done.get(h)
            if h not in got:
                waiting.append(t)
            elif old is not None and (
                self.options.resume or old.info.start_time >= self.started_ms
            ):
                reused.append((t, run_row(t, old, "reused")))
            else:
                mine.append(t)
        return mine, reused, waiting

    def record(self, outcome: Outcome, tags: dict[str, str] | None = None) -> RunRow:
        """Log an outcome as a child run with ``tags`` besides the usual ones (a row its worker
        logged is taken as it is), add its row and return it."""
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
        self.n_new += row.status != "reused"  # another sweep's run: not new here
        self._add(row)
        return row

    def notify(self, row: RunRow) -> None:
        """Hand a new child's row to the options' ``on_result`` (which may raise to interrupt)."""
        if self.options.on_result:
            self.options.on_result(row.to_dict())

    def _add(self, row: RunRow) -> None:
        """Add a configuration's row (new or reused); the bar shows each track's best so far."""
        if row.failed:
            self.failed.append((row.label, row.error))
        self.rows.append(row)
        best = {}
        for track, name in self.metrics_by_track.items():
            ok = [r for r in self.rows if not r.failed and r.track in candidates(track)]
            values = np.array([r.metrics.get(name, np.nan) for r in ok], dtype=float)
            best[track] = (
                values[self.metric.best_index(values)] if np.isfinite(values).any() else np.nan
            )
        self.bar.set_postfix_str(
            f"best {self.cfg.protocol} pers={best['personalized']:.3f} "
            f"gen={best['generalized']:.3f} failed={len(self.failed)}"
        )

    def unseen_listener_todo(self, trials: Sequence[Trial]) -> list[Trial]:
        """Each feature set's chosen generalized configuration with unseen listeners on, to
        evaluate (those with a finished run are reused here)."""
        table = sweep_table(self.rows)
        chosen = unseen_listener_trials(table, trials, self.cfg.protocol, self.cfg.metric)
        return [t for t in chosen if self.reused(t) is None]

    # ------------------------------------------------------------ the end
    def finish(self, status: str) -> dict[str, str]:
        """Close the bar, mark this sweep's children still RUNNING as KILLED (their writer was lost;
        listed in the parent's tag ``lost_runs``; best effort, as the sweep may be ending on an
        error it must not hide), attach the summary and close the parent with ``status``; returns
        track -> best run id."""
        if self.bar is not None:
            self.bar.close()
        finished = {r.config_hash: r.run_id for r in self.rows if r.status == "done"}
        try:
            if lost := self.tracker.reap_children(self.id, finished):
                self.tracker.log(self.id, tags={"lost_runs": ",".join(lost)})
        except Exception as e:  # noqa: BLE001 - e.g. the tracking server is gone too
            warnings.warn(
                f"could not check the child runs of {self.id} for lost workers: {type(e).__name__}: {e}",
                stacklevel=2,
            )
        best_ids = self.summarise(sweep_table(self.rows))
        self.tracker.finish(self.id, status)
        return best_ids

    @property
    def unseen_selection(self) -> str:
        """How the unseen-listener configuration is chosen; empty when off."""
        return self.cfg.unseen_selection if self.cfg.unseen_listener else ""

    def nested_unseen(self, table: pd.DataFrame) -> pd.DataFrame:
        """Under nested selection, each left-out listener's configuration chosen among every
        feature set's; else an empty table."""
        if self.unseen_selection != "nested":
            return nested_unseen(table.iloc[0:0])
        return nested_unseen(table, self.cfg.protocol, False, self.cfg.metric)

    def summarise(self, table: pd.DataFrame) -> dict[str, str]:
        """Tag the parent with each track's best child and attach the summary tables (with several
        targets, per target and combined); returns the (first target's) best children."""
        targets = self.cfg.all_targets()
        head = (self.tracker, self.id, table, self.cfg.protocol)
        counts = (time.perf_counter() - self.t_start, self.n_new, self.unseen_selection)
        words: dict[str, Any] = {"layout": self.layout, "keep": list(self.cfg.feature_sets)}
        words |= {"metric": self.cfg.metric, "note": self.corpus_note, "persons": self.persons}
        if len(targets) <= 1:
            return summarise(*head, *counts, self.nested_unseen(table), **words)
        nested = {
            t: self.nested_unseen(table[table["target"] == t] if "target" in table else table)
            for t in targets
        }
        self.best_ids_by_target = summarise_targets(*head, targets, *counts, nested, **words)
        return self.best_ids_by_target.get(targets[0], {})

    def result(
        self, skipped: int, cls: type[SweepResult] = SweepResult, **extra: Any
    ) -> SweepResult:
        """The :class:`SweepResult` (or ``cls``, with ``extra`` fields) of the finished sweep."""
        best_ids = self.best_ids
        main = (
            "generalized"
            if "generalized" in best_ids and "personalized" not in best_ids
            else "personalized"
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
            metric=self.cfg.metric,
            layout=self.layout,
            keep=list(self.cfg.feature_sets),
            without_labels=self.without_labels,
            **extra,
        )
