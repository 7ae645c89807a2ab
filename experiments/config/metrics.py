"""The metrics a config may name (``metric:``): one :class:`MetricSpec` each (function, NaN rule,
direction, default averaging), in one registry; ``ccc`` the default, and :func:`ccc` the
package's one CCC, the official challenge scorer's arithmetic (population statistics, Pearson's
r 0 when undefined; two constant series 0.0, where the scorer divides 0 by 0).

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

from .choices import Registry, check_choice
from .options import CCC_AVERAGINGS

#: what a metric does with a pair holding a NaN or an infinity: ``raise`` (ValueError naming the
#: first), or ``drop`` (the pair is left out; NaN when fewer than two pairs are left)
NAN_RULES = ("raise", "drop")


def finite_pairs(
    y_true: np.ndarray | Iterable[float],
    y_pred: np.ndarray | Iterable[float],
    nan: str = "raise",
    name: str = "metric",
) -> tuple[np.ndarray, np.ndarray]:
    """Two equally long float64 series with the non-finite pairs handled by the rule ``nan``.

    Raises:
        ValueError: different lengths, empty input, or (``raise``) a non-finite value.
    """
    check_choice("NaN rule", nan, NAN_RULES)
    t = np.asarray(y_true, dtype=np.float64).reshape(-1)
    p = np.asarray(y_pred, dtype=np.float64).reshape(-1)
    if t.shape != p.shape:
        raise ValueError(f"{name}: ground truth has {t.size} values but prediction has {p.size}")
    if t.size == 0:
        raise ValueError(f"{name}: empty input")
    ok = np.isfinite(t) & np.isfinite(p)
    if nan == "drop":
        return t[ok], p[ok]
    for what, a in (("ground truth", t), ("prediction", p)):
        bad = ~np.isfinite(a)
        if bad.any():
            raise ValueError(
                f"{name}: {what} has {int(bad.sum())} NaN/inf values (first at row {int(np.argmax(bad))})"
            )
    return t, p


def ccc(
    y_true: np.ndarray | Iterable[float], y_pred: np.ndarray | Iterable[float], nan: str = "raise"
) -> float:
    """Lin's concordance correlation coefficient of two equally long series (see the module
    docstring); ``nan``: :data:`NAN_RULES`.

    Raises:
        ValueError: different lengths, empty input, or (``nan="raise"``) NaN/inf values.
    """
    t, p = finite_pairs(y_true, y_pred, nan, "ccc")
    if t.size < 2 and nan == "drop":
        return float("nan")
    mt, mp = t.mean(), p.mean()
    dt, dp = t - mt, p - mp
    vt, vp = float(np.mean(dt * dt)), float(np.mean(dp * dp))
    st, sp = np.sqrt(vt), np.sqrt(vp)
    # a series of identical values (tested exactly, as scipy's pearsonr does, since its
    # computed variance may be a rounding residue) has no Pearson r: the official scorer's NaN -> 0
    if vt > 0 and vp > 0 and t.min() != t.max() and p.min() != p.max():
        rho = float(np.clip(np.mean(dt * dp) / (st * sp), -1.0, 1.0))  # as pearsonr clips
    else:
        rho = 0.0
    den = vp + vt + (mp - mt) ** 2
    if den == 0:
        return 0.0
    return float(np.clip(2.0 * rho * st * sp / den, -1.0, 1.0))  # |CCC| <= 1 up to rounding


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
