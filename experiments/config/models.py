"""The models a config may name: one :class:`ModelSpec` each, in one registry (another model is
one :func:`register_model` call: docs/config.md). Builders import their estimators when called.

>>> model_spec("ridge").resolve({"alpha": 10})
{'alpha': 10}
>>> model_spec("svr").params["gamma"].domain.text()
'`scale`, `auto` or a number > 0'
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .choices import Registry, check_choice

#: the inputs a model reads: ``rows`` (the windowed features, row-major float32), ``columns``
#: (column-major float64, for trees) or ``position`` (each frame's position in its session,
#: which reads the session's length: never causal)
INPUTS = ("rows", "columns", "position")
#: the preprocessing a model's pipeline starts with (:data:`experiments.models.factory.PREPROCESSING`)
PREPROCESSINGS = ("impute_scale", "fill_empty", "none")
#: the baseline every sweep carries, added when its grid has none
BASELINE = "dummy"


@dataclass(frozen=True)
class Domain:
    """The values a hyperparameter takes: a number in [``low``, ``high``] (``above``: ``low``
    excluded), one of ``names``, or None (``none``)."""

    low: float | None = None
    high: float | None = None
    above: bool = False
    integer: bool = False
    numbers: bool = True
    names: tuple[str, ...] = ()
    none: bool = False

    def text(self) -> str:
        """The domain in words, for messages and the docs table."""
        parts = [f"`{n}`" for n in self.names]
        if self.numbers:
            low = "" if self.low is None else f" {'>' if self.above else '>='} {self.low:g}"
            high = "" if self.high is None else f"{' and' if low else ''} <= {self.high:g}"
            parts.append(f"{'an integer' if self.integer else 'a number'}{low}{high}")
        if self.none:
            parts.append("null")
        return ", ".join(parts[:-1]) + (" or " if len(parts) > 1 else "") + parts[-1]

    def admits(self, value: Any) -> bool:
        if value is None or value in self.names:
            return value is not None or self.none
        if not self.numbers or isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not math.isfinite(value) or (self.integer and not isinstance(value, int)):
            return False  # 300.0 for an integer: the estimators refuse a float when fitted
        low_ok = self.low is None or value > self.low or (value == self.low and not self.above)
        return low_ok and (self.high is None or value <= self.high)


@dataclass(frozen=True)
class Hyper:
    """One hyperparameter of a model: its ``default``, its :class:`Domain`, a ``note`` for the docs."""

    default: Any
    domain: Domain = field(default_factory=Domain)
    note: str = ""


#: a builder: (resolved hyperparameters, seed) -> the pipeline's last step (named ``model``),
#: or a list of (name, step) pairs that ends in it
Builder = Callable[[dict[str, Any], int], Any]


@dataclass(frozen=True)
class ModelSpec:
    """A model a config may name: ``build`` a :data:`Builder` or ``"module:function"`` naming one;
    ``closed_form``: hyperparameters -> the ridge penalty (> 0) with which
    :class:`experiments.models.ridge_stats.SufficientStats` fits its pipeline (None: fit it)."""

    name: str
    doc: str
    build: Builder | str
    params: Mapping[str, Hyper] = field(default_factory=dict)
    preprocess: str = "none"
    inputs: str = "rows"
    slow: bool = False
    baseline: bool = False
    closed_form: Callable[[Mapping[str, Any]], float | None] | None = None

    def __post_init__(self) -> None:
        check_choice("model input", self.inputs, INPUTS, f" of model {self.name!r}")
        check_choice("preprocessing", self.preprocess, PREPROCESSINGS, f" of model {self.name!r}")

    @property
    def defaults(self) -> dict[str, Any]:
        return {k: h.default for k, h in self.params.items()}

    def resolve(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The defaults updated with ``params`` (a ``name`` key must be this model's); ValueError
        for an unknown hyperparameter or a value outside its domain."""
        given = dict(params or {})
        if given.pop("name", self.name) != self.name:
            raise ValueError(f"model name {self.name!r} disagrees with params['name']")
        for key, value in given.items():
            check_choice("hyperparameter", key, sorted(self.params), f" for model {self.name!r}")
            if not self.params[key].domain.admits(value):
                domain = self.params[key].domain.text()
                raise ValueError(f"{self.name}.{key}: expected {domain}, got {value!r}")
        return {**self.defaults, **given}


#: the models a config may name (:meth:`~.choices.Registry.get` raises with the nearest name)
MODELS: Registry[ModelSpec] = Registry("model")
register_model, unregister_model = MODELS.register, MODELS.unregister
model_spec, model_specs = MODELS.get, MODELS.all


def resolve_model_params(name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Model ``name``'s defaults updated with ``params`` (:meth:`ModelSpec.resolve`)."""
    return model_spec(name).resolve(params)


POSITIVE = Domain(low=0, above=True)
COUNT = Domain(low=1, integer=True)
UNIT = Domain(low=0, high=1, above=True)


def _estimator(path: str, seeded: bool = True, **fixed: Any) -> Builder:
    """A builder of the estimator class ``module:Class`` with ``fixed`` arguments, imported when
    built (scikit-learn; loading libxgboost costs ~0.3 s)."""

    def build(p: dict[str, Any], seed: int) -> Any:
        module, _, name = path.partition(":")
        seeds = {"random_state": seed} if seeded else {}
        return getattr(importlib.import_module(module), name)(**p, **fixed, **seeds)

    return build


def _svr(p: dict[str, Any], seed: int) -> Any:
    from sklearn.kernel_approximation import Nystroem  # scikit-learn: loaded when built
    from sklearn.svm import SVR, LinearSVR

    if p["nystroem_components"] is None:
        return SVR(kernel="rbf", C=p["C"], gamma=p["gamma"], epsilon=p["epsilon"])
    # after StandardScaler X.var() is about 1, so SVR's gamma="scale" (and "auto") is
    # 1 / n_features: exactly Nystroem's gamma=None
    gamma = None if p["gamma"] in ("scale", "auto") else p["gamma"]
    n = int(p["nystroem_components"])
    kernel = Nystroem(kernel="rbf", gamma=gamma, n_components=n, random_state=seed)
    svr = LinearSVR(C=p["C"], epsilon=p["epsilon"], dual="auto", max_iter=5000, random_state=seed)
    return [("kernel", kernel), ("model", svr)]


_SCALED = "after median imputation and scaling"
for _spec in (
    ModelSpec(
        "svr",
        f"scikit-learn `SVR` (RBF kernel) {_SCALED}",
        _svr,
        {
            "C": Hyper(1.0, POSITIVE),
            "gamma": Hyper("scale", Domain(low=0, above=True, names=("scale", "auto"))),
            "epsilon": Hyper(0.1, Domain(low=0)),
            "nystroem_components": Hyper(
                None,
                Domain(low=1, integer=True, none=True),
                "Nystroem RBF features + `LinearSVR` instead of the exact SVR (for more than "
                "about 20,000 training rows)",
            ),
        },
        preprocess="impute_scale",
        slow=True,
    ),
    ModelSpec(
        "linear_svr",
        f"scikit-learn `LinearSVR` {_SCALED}",
        _estimator("sklearn.svm:LinearSVR", dual="auto"),
        {
            "C": Hyper(1.0, POSITIVE),
            "epsilon": Hyper(0.0, Domain(low=0)),
            "loss": Hyper(
                "epsilon_insensitive",
                Domain(numbers=False, names=("epsilon_insensitive", "squared_epsilon_insensitive")),
                "the squared loss allows the primal solver",
            ),
            "max_iter": Hyper(5000, COUNT),
        },
        preprocess="impute_scale",
    ),
    ModelSpec(
        "xgboost",
        "XGBoost `XGBRegressor` (missing values handled natively)",
        _estimator("xgboost:XGBRegressor", tree_method="hist"),
        {
            "n_estimators": Hyper(300, COUNT),
            "max_depth": Hyper(3, Domain(low=0, integer=True)),
            "learning_rate": Hyper(0.05, POSITIVE),
            "subsample": Hyper(1.0, UNIT),
            "colsample_bytree": Hyper(1.0, UNIT),
            "n_jobs": Hyper(
                1,
                Domain(integer=True),
                "threads per fit; 1 so that parallel configurations do not oversubscribe the cores",
            ),
        },
        slow=True,
    ),
    ModelSpec(
        "hist_gb",
        "scikit-learn `HistGradientBoostingRegressor` (missing values handled natively)",
        # early_stopping=False: max_iter means what it says, whatever the number of rows
        _estimator("sklearn.ensemble:HistGradientBoostingRegressor", early_stopping=False),
        {
            "max_iter": Hyper(200, COUNT),
            "learning_rate": Hyper(0.1, POSITIVE),
            "max_depth": Hyper(None, Domain(low=1, integer=True, none=True), "null: unlimited"),
        },
        preprocess="fill_empty",
        inputs="columns",
        slow=True,
    ),
    ModelSpec(
        "random_forest",
        f"scikit-learn `RandomForestRegressor` {_SCALED} (the whole-session study's tree model)",
        _estimator("sklearn.ensemble:RandomForestRegressor", n_jobs=1),
        {
            "n_estimators": Hyper(200, COUNT),
            "max_depth": Hyper(None, Domain(low=1, integer=True, none=True), "null: unlimited"),
        },
        preprocess="impute_scale",
        slow=True,
    ),
    ModelSpec(
        "ridge",
        f"scikit-learn `Ridge` {_SCALED}",
        # copy_X=False: Ridge centres the scaler's output (the pipeline's own copy) in place
        _estimator("sklearn.linear_model:Ridge", seeded=False, copy_X=False),
        {"alpha": Hyper(1.0, Domain(low=0))},
        preprocess="impute_scale",
        closed_form=lambda p: float(p["alpha"]) if p["alpha"] > 0 else None,
    ),
    ModelSpec(
        BASELINE,
        "the training mean (per listener when personalized): the baseline",
        _estimator("sklearn.dummy:DummyRegressor", seeded=False, strategy="mean"),
        baseline=True,
    ),
    ModelSpec(
        "position_prior",
        "the mean training-label curve over normalised session time",
        "experiments.models.position_prior:build",
        {"n_bins": Hyper(100, COUNT, "bins of normalised session time")},
        inputs="position",
        baseline=True,
    ),
):
    register_model(_spec)
