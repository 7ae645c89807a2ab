"""A fitted personalization meta-estimator in files that load without running arbitrary code: its scikit-learn
parts in one skops file, each ``XGBRegressor`` in XGBoost's own JSON model format (:func:`save_estimator`,
:func:`load_estimator`). Loading trusts skops's defaults (builtins, numpy, scikit-learn's public estimators) and
:data:`TRUSTED`, no other type; nothing is pickled."""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sklearn.base import BaseEstimator

from featurestore.storage.provenance import library_versions

from ..errors import ExperimentsError
from ..models.factory import FillEmptyColumns, MedianImputer
from ..models.personalization import (
    CalibratedPerListener,
    GlobalRegressor,
    ListenerOneHot,
    PerListenerRegressor,
)
from ..models.position_prior import PositionPrior

#: the skops file of the scikit-learn parts, in the folder
SKOPS_FILE = "estimator.skops"
#: the formats of the files a description lists
FORMATS = ("skops", "xgboost-json")


class XGBoostPart:
    """Where an ``XGBRegressor`` was in the skops tree: entry ``index`` of the description's ``xgboost`` list."""

    def __init__(self, index: int):
        self.index = index


#: the types a saved estimator holds that skops does not trust by default: this package's estimators, the
#: placeholder, hist_gb's loss and binning (trusted by default from skops 0.14), and the trees of random_forest
#: and hist_gb (skops leaves them out: their node arrays are indexed unchecked at predict, so a crafted file can
#: crash the process; a file this package wrote holds valid ones)
TRUSTED = sorted(
    [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in (GlobalRegressor, PerListenerRegressor, CalibratedPerListener, ListenerOneHot)
        + (MedianImputer, FillEmptyColumns, PositionPrior, XGBoostPart)
    ]
    + [
        "sklearn._loss.link.IdentityLink",
        "sklearn._loss.link.Interval",
        "sklearn._loss.loss.HalfSquaredError",
        "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
        "sklearn.tree._tree.Tree",
    ]
)


class SavedEstimatorError(ExperimentsError):
    """A saved estimator that cannot be loaded: the message names the file and what to do."""


def _is_xgboost(obj: Any) -> bool:
    cls = type(obj)
    return cls.__name__ == "XGBRegressor" and cls.__module__.startswith("xgboost.")


def _replace(obj: Any, found: Callable[[Any], bool], make: Callable[[Any], Any]) -> Any:
    """A copy of the tree ``obj`` (estimators, lists, tuples, dicts) with each part ``found`` replaced by ``make``
    of it; the originals are left as they are and other values shared."""
    if found(obj):
        return make(obj)
    if isinstance(obj, list | tuple):
        return type(obj)(_replace(v, found, make) for v in obj)
    if isinstance(obj, dict):
        return {k: _replace(v, found, make) for k, v in obj.items()}
    if isinstance(obj, BaseEstimator):
        new = object.__new__(type(obj))
        new.__dict__.update({k: _replace(v, found, make) for k, v in vars(obj).items()})
        return new
    return obj


def _same(a: Any, b: Any) -> bool:
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return nan or (type(a) is type(b) and a == b)


def _params(model: Any) -> dict[str, Any]:
    """The hyperparameters of an ``XGBRegressor`` that differ from its class defaults (JSON)."""
    defaults = type(model)().get_params()
    params = {k: v for k, v in model.get_params().items() if not _same(v, defaults.get(k))}
    for key, value in params.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise SavedEstimatorError(
                f"XGBRegressor hyperparameter {key}={value!r} cannot be saved as JSON ({e}); "
                "set it to a number, string or list before fitting"
            ) from e
    return params


def save_estimator(estimator: Any, folder: str | Path) -> dict[str, Any]:
    """Write the fitted ``estimator`` into ``folder`` (made if needed): :data:`SKOPS_FILE` and one
    ``xgboost-<i>.json`` per fitted ``XGBRegressor``. Returns its description (JSON): ``files`` (name -> format),
    ``xgboost`` (per model: its file, None for an unfitted template, and its non-default ``params``), ``versions``."""
    import skops.io  # imported when used: it imports every scikit-learn estimator (~2 s)

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = {SKOPS_FILE: "skops"}
    parts: list[dict[str, Any]] = []
    seen: dict[int, XGBoostPart] = {}

    def store(model: Any) -> XGBoostPart:
        if id(model) not in seen:
            file = None
            if model.__sklearn_is_fitted__():
                file = f"xgboost-{len(parts)}.json"
                model.save_model(str(folder / file))
                files[file] = "xgboost-json"
            parts.append({"file": file, "params": _params(model)})
            seen[id(model)] = XGBoostPart(len(parts) - 1)
        return seen[id(model)]

    skops.io.dump(_replace(estimator, _is_xgboost, store), folder / SKOPS_FILE)
    versions = dict(library_versions(("scikit-learn", "xgboost", "skops")))
    return {"files": files, "xgboost": parts, "versions": versions}


def _file(folder: Path, name: str, files: dict[str, str]) -> Path:
    path = folder / name
    if not path.is_file():
        raise SavedEstimatorError(
            f"{path}: no such file; a saved estimator needs every file its description lists "
            f"({', '.join(sorted(files))}): save it again with save_estimator"
        )
    return path


def load_estimator(folder: str | Path, description: dict[str, Any]) -> Any:
    """The estimator :func:`save_estimator` wrote into ``folder`` with ``description``; a skops file holding a type
    outside skops's defaults and :data:`TRUSTED` is refused, not loaded."""
    import skops.io  # imported when used: it imports every scikit-learn estimator (~2 s)

    folder, files = Path(folder), description["files"]
    for name, kind in files.items():
        if kind not in FORMATS:
            raise SavedEstimatorError(
                f"{folder / name}: unknown format {kind!r}; expected one of {FORMATS}"
            )
    path = _file(folder, SKOPS_FILE, files)
    for name in files:  # every file there before one is read
        _file(folder, name, files)
    try:
        untrusted = sorted(set(skops.io.get_untrusted_types(file=path)) - set(TRUSTED))
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise SavedEstimatorError(
            f"{path} is not a skops file ({e}): save the estimator again"
        ) from e
    if untrusted:
        raise SavedEstimatorError(
            f"{path} holds types this package does not write: {', '.join(untrusted)}; it was not loaded "
            "(loading them could run their code): load only files save_estimator wrote"
        )
    tree = skops.io.load(path, trusted=TRUSTED)
    parts = description["xgboost"]
    models: dict[int, Any] = {}

    def rebuild(part: XGBoostPart) -> Any:
        if part.index not in models:
            from xgboost import XGBRegressor  # loading libxgboost costs ~0.3 s

            if not 0 <= part.index < len(parts):
                raise SavedEstimatorError(
                    f"{path} holds XGBoost model {part.index}, its description lists {len(parts)}: pass the "
                    "description save_estimator returned for this folder"
                )
            entry = parts[part.index]
            model = XGBRegressor(**entry["params"])
            if entry["file"] is not None:
                file = _file(folder, entry["file"], files)
                try:
                    model.load_model(str(file))
                except ValueError as e:  # XGBoostError: not an XGBoost model file
                    first = str(e).splitlines()[0]
                    raise SavedEstimatorError(f"{file} is not an XGBoost model ({first})") from e
            models[part.index] = model
        return models[part.index]

    return _replace(tree, lambda obj: isinstance(obj, XGBoostPart), rebuild)
