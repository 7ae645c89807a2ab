"""A :class:`~experiments.trained.model.TrainedModel` as an MLflow pyfunc model: logged into
its run, registered, loaded by ``models:/``, ``runs:/`` or a run id (docs/using_a_model.md).

The pyfunc is "models from code": MLflow runs :data:`ENTRY` (this package's file, copied into
the model) instead of unpickling a Python object, and the fitted parts load as
:func:`~experiments.trained.model.load_model` loads them.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from ..tracking.provenance import package_version
from .model import ModelError, TrainedModel, load_model, save_model

#: the file MLflow runs to build the pyfunc (it calls ``mlflow.models.set_model``)
ENTRY = Path(__file__).with_name("pyfunc_entry.py")
#: the run's artifact folder of the model, and the artifact name of the fitted parts inside it
ARTIFACT, BUNDLE = "model", "trained"
#: the frame table's optional column naming each row's session (several sessions in one request)
SESSION_COLUMN = "session"
#: the alias of the chosen version of a registered model
ALIAS = "chosen"
#: frames of the input example logged with a model
EXAMPLE_FRAMES = 5


def predict_frames(model: TrainedModel, frames: pd.DataFrame) -> pd.DataFrame:
    """Per-frame predictions of a frame table (several sessions told apart by a ``session``
    column, each in frame order), one column named after the target (and ``session``)."""
    target = model.trial.target
    if SESSION_COLUMN not in frames:
        return pd.DataFrame({target: model.predict_frame(frames)})
    parts = []
    for session, rows in frames.groupby(SESSION_COLUMN, sort=False):
        p = model.predict_frame(rows, str(session))
        parts.append(pd.DataFrame({SESSION_COLUMN: session, target: p}))
    return pd.concat(parts, ignore_index=True)


class TrainedPyfunc:
    """The pyfunc's Python model (subclassed from ``mlflow.pyfunc.PythonModel`` in :data:`ENTRY`)."""

    model: TrainedModel

    def load_context(self, context: Any) -> None:
        self.model = load_model(context.artifacts[BUNDLE])

    # unannotated: MLflow reads an annotation of ``model_input`` as the input's schema
    def predict(self, context, model_input, params=None):  # type: ignore[no-untyped-def]
        return predict_frames(self.model, pd.DataFrame(model_input))


def model_name(experiment: str, track: str) -> str:
    """The registered model of an experiment's track: ``<experiment>-<track>``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{experiment}-{track}")


def save_pyfunc(model: TrainedModel, path: str | os.PathLike, example: pd.DataFrame) -> Path:
    """Write the pyfunc model folder at ``path``, its signature and input example from ``example``."""
    # MLflow (about 2 s) loads when a model is written or read
    from mlflow.models import infer_signature
    from mlflow.pyfunc import save_model as save_mlflow_model
    from mlflow.types import ColSpec, DataType

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # MLflow's hints (an integer column, no type hints on predict): the signature is given
        warnings.filterwarnings("ignore", category=UserWarning, module="mlflow")
        bundle = save_model(model, Path(tmp) / BUNDLE)
        head = example.head(EXAMPLE_FRAMES)
        signature = infer_signature(head, predict_frames(model, head))
        # a request may name each row's session (several sessions at once): an optional column
        signature.inputs.inputs.append(ColSpec(DataType.string, SESSION_COLUMN, required=False))
        save_mlflow_model(
            path,
            python_model=str(ENTRY),
            artifacts={BUNDLE: str(bundle)},
            signature=signature,
            input_example=head,
            # this package runs the model (`--env-manager local`); naming it skips the inference
            pip_requirements=[f"omg-empathy-bench=={package_version()}"],
            metadata={"config_hash": model.trial.hash(), "track": model.trial.track},
        )
    return Path(path)


def log_model(client: Any, run_id: str, model: TrainedModel, example: pd.DataFrame) -> float:
    """Log ``model`` into run ``run_id``'s artifact ``model/``; the seconds it took."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        save_pyfunc(model, Path(tmp) / ARTIFACT, example)
        client.log_artifacts(run_id, str(Path(tmp) / ARTIFACT), ARTIFACT)
    client.set_tag(run_id, "logged_model", ARTIFACT)
    return time.perf_counter() - t0


def logged_bytes(client: Any, run_id: str) -> int:
    """The bytes of the fitted parts of the model logged into ``run_id``."""
    files = client.list_artifacts(run_id, f"{ARTIFACT}/artifacts/{BUNDLE}")
    return sum(int(f.file_size or 0) for f in files)


def register(client: Any, run_id: str, name: str, alias: str = ALIAS) -> str:
    """Register run ``run_id``'s logged model as a new version of ``name`` with ``alias`` on it;
    the version."""
    from mlflow.exceptions import MlflowException  # as in save_pyfunc

    try:
        client.create_registered_model(name)
    except MlflowException:  # it exists
        pass
    source = f"{client.get_run(run_id).info.artifact_uri}/{ARTIFACT}"
    version = client.create_model_version(name, source, run_id=run_id).version
    client.set_registered_model_alias(name, alias, version)
    return str(version)


def model_uri(model: str) -> str:
    """``models:/...`` and ``runs:/...`` as given, a run id as ``runs:/<id>/model``."""
    if model.startswith(("models:/", "runs:/")) or os.path.isdir(model):
        return model
    if re.fullmatch(r"[0-9a-f]{32}", model):
        return f"runs:/{model}/{ARTIFACT}"
    raise ModelError(
        f"{model!r} names no model: give models:/<name>@<alias>, runs:/<run id>/model, a run id "
        "or a folder `mlflow models` wrote"
    )


def _run_artifact(client: Any, uri: str) -> tuple[str, str]:
    """(run id, artifact path) of ``models:/<name>@<alias>``, ``models:/<name>/<version>`` or
    ``runs:/<id>/<path>``, read from ``client``'s registry."""
    if uri.startswith("runs:/"):
        run_id, _, path = uri[len("runs:/") :].partition("/")
        return run_id, path or ARTIFACT
    m = re.fullmatch(r"models:/([^@/]+)(?:@([^/]+)|/(\d+))", uri)
    if m is None:
        raise ModelError(f"{uri}: give models:/<name>@<alias> or models:/<name>/<version>")
    name, alias, version = m.groups()
    mv = (
        client.get_model_version_by_alias(name, alias)
        if alias
        else client.get_model_version(name, version)
    )
    return mv.run_id, ARTIFACT


def fetch_model(model: str, tracking_uri: str) -> TrainedModel:
    """The :class:`TrainedModel` of a model URI or run id (:func:`model_uri`), downloaded from
    the tracking store (its model registry too) at ``tracking_uri``."""
    from mlflow import MlflowClient  # as in save_pyfunc
    from mlflow.exceptions import MlflowException

    uri = model_uri(model)
    if os.path.isdir(uri):
        return load_model(Path(uri) / "artifacts" / BUNDLE, uri)
    client = MlflowClient(tracking_uri, registry_uri=tracking_uri)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            run_id, path = _run_artifact(client, uri)
            where = Path(client.download_artifacts(run_id, f"{path}/artifacts/{BUNDLE}", tmp))
        except (MlflowException, OSError) as e:
            raise ModelError(
                f"cannot load model {uri} from the tracking store: {e}; save a run's model with "
                "`experiments save RUN_ID` (the sweep registers <experiment>-<track>@chosen)"
            ) from e
        return load_model(where, uri)
