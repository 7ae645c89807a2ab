"""The metrics a config may name (``metric:``): one :class:`MetricSpec` each, in one registry
(docs/config.md, Adding a metric); code downstream asks the spec, never compares a metric's name.
``ccc`` is :func:`featurestore.concordance.ccc`, the official challenge scorer's arithmetic;
``pearson`` (MuSe's score), ``rmse`` and ``mae`` (reported beside CCC by AVEC and many papers)
are there too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from featurestore.concordance import (
    NAN_RULES,
    ccc,
    finite_pairs,
    mae,
    pearson,
    rmse,
    shifted_cccs,
    shifted_pearsons,
    shifted_rmses,
)

from .choices import Registry, check_choice
from .options import AVERAGINGS

#: the metric a config scores by when it names none
DEFAULT_METRIC = "ccc"

#: a metric of ``truth`` against each prediction at every circular lag (element ``k`` against
#: ``np.roll(pred, k)``), as one array per prediction
Shifted = Callable[[np.ndarray, Sequence[np.ndarray]], list[np.ndarray]]


@dataclass(frozen=True)
class MetricSpec:
    """A metric a config may name (its fields: docs/config.md, Adding a metric): ``fn(labels,
    predictions)`` scores two finite float64 series; ``doc`` is its line in docs/config.md."""

    name: str
    fn: Callable[[np.ndarray, np.ndarray], float]
    doc: str = ""
    higher_is_better: bool = True
    nan: str = "raise"
    averaging: str = "sessions"
    label: str = ""
    bounds: tuple[float, float] | None = None
    intervals: bool = True
    chance: bool = True
    shifted: Shifted | None = None

    def __post_init__(self) -> None:
        check_choice("NaN rule", self.nan, NAN_RULES, f" of metric {self.name!r}")
        check_choice("averaging", self.averaging, AVERAGINGS, f" of metric {self.name!r}")
        if self.bounds is not None and not self.bounds[0] < self.bounds[1]:
            raise ValueError(f"metric {self.name!r}: bounds {self.bounds} are not (low, high)")

    @property
    def title(self) -> str:
        """The metric as tables and plots name it."""
        return self.label or self.name

    @property
    def diff_bounds(self) -> tuple[float, float] | None:
        """The range a difference of two values lies in (None: unbounded)."""
        if self.bounds is None:
            return None
        width = self.bounds[1] - self.bounds[0]
        return (-width, width)

    @property
    def unit(self) -> str:
        """Its range as a plot's axis says it, ``" (-1 to 1)"``; empty when unbounded."""
        return "" if self.bounds is None else f" ({self.bounds[0]:g} to {self.bounds[1]:g})"

    def lacks(self) -> list[str]:
        """What this metric's reports go without, one sentence each (empty for CCC)."""
        return [
            f"metric `{self.name}` has no {what} (its spec sets `{flag}=False`: it does not apply)"
            for what, flag, applies in (
                ("95 % intervals", "intervals", self.intervals),
                ("chance level", "chance", self.chance),
            )
            if not applies
        ]

    def column(self, what: str) -> str:
        """A report's column of this metric for ``what``: ``ccc_personalized``."""
        return f"{self.name}_{what}"

    def __call__(
        self, y_true: np.ndarray | Iterable[float], y_pred: np.ndarray | Iterable[float]
    ) -> float:
        """The metric of two series, its NaN rule applied first."""
        t, p = finite_pairs(y_true, y_pred, self.nan, self.name)
        return float(self.fn(t, p)) if t.size >= 2 or self.nan == "raise" else float("nan")

    @property
    def direction(self) -> Literal["maximize", "minimize"]:
        """``maximize`` or ``minimize`` (an Optuna study's words)."""
        return "maximize" if self.higher_is_better else "minimize"

    def better(self, a: float, b: float) -> bool:
        """Whether value ``a`` is strictly better than ``b`` (NaN is never better)."""
        if np.isnan(a):
            return False
        return bool(np.isnan(b) or (a > b if self.higher_is_better else a < b))

    def best_index(self, values: Sequence[float] | np.ndarray) -> int:
        """The position of the first best of ``values`` (NaN skipped; ValueError if all are)."""
        v = np.asarray(values, dtype=float)
        if not np.isfinite(v).any() and not np.isinf(v).any():
            raise ValueError(f"no {self.name} value to choose by: all {len(v)} are NaN")
        return int(np.nanargmax(v) if self.higher_is_better else np.nanargmin(v))

    def key(self, split: str, what: str) -> str:
        """The logged name of the metric of ``split`` for ``what``: ``val.ccc_generalized``."""
        return f"{split}.{self.column(what)}"


#: the metrics a config may name (:meth:`~.choices.Registry.get` raises with the nearest name)
METRICS: Registry[MetricSpec] = Registry("metric")
register_metric, unregister_metric = METRICS.register, METRICS.unregister
get_metric, metric_specs = METRICS.get, METRICS.all


register_metric(
    MetricSpec(
        DEFAULT_METRIC,
        ccc,
        "Lin's concordance correlation coefficient, as the challenge scores it",
        label="CCC",
        bounds=(-1.0, 1.0),
        shifted=shifted_cccs,
    )
)
register_metric(
    MetricSpec(
        "pearson",
        pearson,
        "Pearson's correlation (MuSe's score; 0 for a constant series, as CCC's r)",
        label="Pearson's r",
        bounds=(-1.0, 1.0),
        shifted=shifted_pearsons,
    )
)
register_metric(
    MetricSpec(
        "rmse",
        rmse,
        "root mean squared error, in the target's units",
        higher_is_better=False,
        label="RMSE",
        shifted=shifted_rmses,
    )
)
register_metric(
    MetricSpec(
        "mae",
        mae,
        "mean absolute error, in the target's units",
        higher_is_better=False,
        label="MAE",
    )
)
