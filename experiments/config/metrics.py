"""The metrics a config may name (``metric:``): one :class:`MetricSpec` each (function, NaN rule,
direction, default averaging), in one registry; ``ccc`` the default, computed by the package's
one CCC (:func:`featurestore.concordance.ccc`, the official challenge scorer's arithmetic).

>>> ccc([0.1, 0.2, 0.3], [0.1, 0.2, 0.3]), ccc([0.1, 0.2, 0.3], [0.0, 0.0, 0.0])
(1.0, 0.0)
>>> ccc([0.1, float("nan"), 0.3, 0.2], [0.1, 0.5, 0.3, 0.2], nan="drop")
1.0
>>> get_metric("ccc").best_index([0.2, float("nan"), 0.5])
2
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from featurestore.concordance import NAN_RULES, ccc, finite_pairs

from .choices import Registry, check_choice
from .options import CCC_AVERAGINGS


@dataclass(frozen=True)
class MetricSpec:
    """A metric a config may name (see the module docstring).

    ``fn(labels, predictions)`` scores two finite float64 series of a session (or of a split's
    sessions concatenated); ``nan``: what :meth:`__call__` does with non-finite pairs first;
    ``higher_is_better``: its direction; ``averaging``: how a split's values are averaged when
    the config says nothing (``ccc_averaging``); ``doc``: its line in docs/config.md.
    """

    name: str
    fn: Callable[[np.ndarray, np.ndarray], float]
    doc: str = ""
    higher_is_better: bool = True
    nan: str = "raise"
    averaging: str = "sessions"

    def __post_init__(self) -> None:
        check_choice("NaN rule", self.nan, NAN_RULES, f" of metric {self.name!r}")
        check_choice("averaging", self.averaging, CCC_AVERAGINGS, f" of metric {self.name!r}")

    def __call__(
        self, y_true: np.ndarray | Iterable[float], y_pred: np.ndarray | Iterable[float]
    ) -> float:
        """The metric of two series, its NaN rule applied first (NaN if fewer than two pairs
        are left by ``drop``)."""
        t, p = finite_pairs(y_true, y_pred, self.nan, self.name)
        return float(self.fn(t, p)) if t.size >= 2 or self.nan == "raise" else float("nan")

    @property
    def direction(self) -> Literal["maximize", "minimize"]:
        """``maximize`` or ``minimize`` (an Optuna study's words)."""
        return "maximize" if self.higher_is_better else "minimize"

    def better(self, a: float, b: float) -> bool:
        """Whether value ``a`` is strictly better than ``b`` (NaN is never better; anything
        finite is better than NaN)."""
        if np.isnan(a):
            return False
        return bool(np.isnan(b) or (a > b if self.higher_is_better else a < b))

    def best_index(self, values: Sequence[float] | np.ndarray) -> int:
        """The position of the first best of ``values`` (NaN skipped).

        Raises:
            ValueError: every value is NaN (or there is none).
        """
        v = np.asarray(values, dtype=float)
        if not np.isfinite(v).any() and not np.isinf(v).any():
            raise ValueError(f"no {self.name} value to choose by: all {len(v)} are NaN")
        return int(np.nanargmax(v) if self.higher_is_better else np.nanargmin(v))

    def key(self, split: str, what: str) -> str:
        """The logged name of the metric of ``split`` for ``what`` (an averaging, a track, a
        listener): ``val.ccc_generalized``, ``test.ccc_listener_3``."""
        return f"{split}.{self.name}_{what}"


#: the metrics a config may name (:meth:`~.choices.Registry.get` raises with the nearest name)
METRICS: Registry[MetricSpec] = Registry("metric")
register_metric, unregister_metric = METRICS.register, METRICS.unregister
get_metric, metric_specs = METRICS.get, METRICS.all


register_metric(
    MetricSpec(
        "ccc",
        ccc,
        "Lin's concordance correlation coefficient, as the challenge scores it",
    )
)
