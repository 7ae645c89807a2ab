"""A run's configuration as a model that leaves it: ``experiments save RUN_ID`` (:func:`save_run`),
the sweep's choices saved and registered (:func:`save_choices`), ``experiments predict``
(:func:`predict_store`); docs/using_a_model.md."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from featurestore.storage.store import Store

from ..errors import ExperimentsError
from ..tracking.child_runs import write_prediction_csv
from ..tracking.tracker import CONFIG_HASH_TAG, resolve_tracking_uri, tracking_client
from ..trained.model import (
    ModelError,
    TrainedModel,
    channel_extractors,
    frame_table,
    store_tables,
    train_model,
)
from ..trained.pyfunc import (
    ALIAS,
    ARTIFACT,
    fetch_model,
    log_model,
    logged_bytes,
    model_name,
    register,
)
from .explain import fitted_store_fingerprint, logged_run, run_trial
from .parent_run import as_store


@dataclass(frozen=True)
class Saved:
    """A run's model as logged: its run, registered name and version (empty when not
    registered), the seconds to fit and to log it, and the fitted parts' bytes."""

    run_id: str
    track: str
    name: str = ""
    version: str = ""
    fit_seconds: float = 0.0
    log_seconds: float = 0.0
    size_bytes: int = 0
    #: the run held its model already (a resumed sweep): nothing was fitted or logged
    reused: bool = False

    @property
    def uri(self) -> str:
        return f"models:/{self.name}@{ALIAS}" if self.name else f"runs:/{self.run_id}/{ARTIFACT}"


def _save_trained(
    client: Any,
    run_id: str,
    model: TrainedModel,
    store: Store,
    name: str = "",
    fit_seconds: float = 0.0,
) -> Saved:
    """Log ``model`` into ``run_id`` (its input example from its first training session) and,
    given a ``name``, register it with the ``chosen`` alias."""
    first = model.provenance["train_sessions"][0]
    example = frame_table(store_tables(store, model.trial, [first])[0])
    seconds = log_model(client, run_id, model, example)
    version = register(client, run_id, name) if name else ""
    size = logged_bytes(client, run_id)
    return Saved(run_id, model.trial.track, name, version, fit_seconds, seconds, size)


def save_run(
    run_id: str,
    store: str | os.PathLike = "features",
    tracking_uri: str | None = None,
    name: str = "",
    allow_other_store: bool = False,
) -> Saved:
    """``experiments save RUN_ID``: the run's configuration refitted on ``store`` as its sweep
    fitted it, logged into the run as an MLflow model (registered as ``name`` if given).
    Raises :class:`ModelError` for no such run, a parent run, a configuration other code logged,
    or (without ``allow_other_store``) a store whose fingerprint is not the run's."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = resolve_tracking_uri(tracking_uri)
    client = tracking_client(uri)
    run = logged_run(
        client,
        uri,
        run_id,
        ModelError,
        "a configuration's child run id from the MLflow UI or the sweep's summary",
    )
    return _fit_and_save(client, run, as_store(store), name, allow_other_store)


def _fit_and_save(client: Any, run: Any, st: Store, name: str, allow_other_store: bool) -> Saved:
    """:func:`save_run` once the run is read: refit, log into it, register as ``name``."""
    run_id = run.info.run_id
    trial = run_trial(run_id, run.data.params, run.data.tags.get(CONFIG_HASH_TAG, ""))
    fingerprint = fitted_store_fingerprint(
        run,
        st,
        ModelError,
        None
        if allow_other_store
        else "save it with the run's store, or pass --allow-mismatch to fit it on this one",
    )
    t0 = time.perf_counter()
    model = train_model(trial, st, fingerprint)
    fit_seconds = time.perf_counter() - t0
    return _save_trained(client, run_id, model, st, name, fit_seconds)


def save_choices(
    choices: Mapping[str, Mapping[str, str]],
    store: str | os.PathLike,
    tracking_uri: str | None,
    experiment: str,
) -> list[Saved]:
    """Each target's and track's chosen run (``choices``: target -> track -> run id) saved, once
    when both tracks chose it, and registered as ``<experiment>-<track>`` (several targets:
    ``<experiment>-<target>-<track>``) with the alias ``chosen``."""
    out: list[Saved] = []
    saved: dict[str, Saved] = {}
    if not any(choices.values()):
        return out
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    client, st = tracking_client(resolve_tracking_uri(tracking_uri)), as_store(store)
    for target, tracks in choices.items():
        prefix = experiment if len(choices) == 1 else f"{experiment}-{target}"
        for track, run_id in tracks.items():
            name = model_name(prefix, track)
            if run_id in saved:
                version = _registered(client, run_id, name)
                out.append(replace(saved[run_id], track=track, name=name, version=version))
                continue
            run = client.get_run(run_id)
            if run.data.tags.get("logged_model") == ARTIFACT:
                # a resumed sweep that chose the same run: its model is there, fitted on this store
                version = _registered(client, run_id, name)
                size = logged_bytes(client, run_id)
                saved[run_id] = Saved(run_id, track, name, version, size_bytes=size, reused=True)
                out.append(saved[run_id])
            else:
                saved[run_id] = _fit_and_save(client, run, st, name, allow_other_store=False)
                out.append(replace(saved[run_id], track=track))
    return out


def _registered(client: Any, run_id: str, name: str) -> str:
    """The version of ``name`` that the ``chosen`` alias names when it is ``run_id``'s model,
    else a new version of it registered (:func:`register`)."""
    from mlflow.exceptions import MlflowException  # as in register

    try:
        current = client.get_model_version_by_alias(name, ALIAS)
    except MlflowException:  # no such model or alias yet
        current = None
    if current is not None and current.run_id == run_id:
        return str(current.version)
    return register(client, run_id, name)


def predict_store(
    model: str,
    store: str | os.PathLike,
    out: str | os.PathLike,
    tracking_uri: str | None = None,
    sessions: Sequence[str] | None = None,
    allow_mismatch: bool = False,
) -> list[Path]:
    """``experiments predict MODEL --store S --out DIR``: one CSV per session of the store
    (labelled or not; ``sessions`` only), named as the store names it, the header the target's
    name. :class:`ModelError` when the store differs from what the model was trained on (missing
    channels or columns, other extractors, another frame rate) unless ``allow_mismatch``."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    trained = fetch_model(model, resolve_tracking_uri(tracking_uri))
    st = as_store(store)
    names = list(sessions) if sessions is not None else st.list_sessions()
    if not names:
        raise ModelError(f"no sessions in the feature store {st.root}")
    try:
        tables = store_tables(st, trained.trial, names, labelled=False)
    except ExperimentsError as e:
        raise ModelError(f"model {model}: {e}") from e
    trained.check(tables, channel_extractors(st, names[0], trained.channels), allow_mismatch)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for t in tables:
        path = folder / f"{t.session}.csv"
        write_prediction_csv(path, trained.predict_table(t), trained.trial.target)
        files.append(path)
    return files
