"""The config's ``gold_standard`` setting: which labels the experiments train and score on, and
the registry of the methods it may name (:data:`GOLD_STANDARDS`: one :class:`GoldStandardSpec`
each; the combining itself is :mod:`experiments.data.gold_standard`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .choices import Registry

#: a method's combination of one session's raters' traces (rater -> frames, each already moved by
#: its lag): the session's gold standard and each rater's weight in it
Combine = Callable[[Mapping[str, Any]], tuple[Any, dict[str, float]]]


@dataclass(frozen=True)
class GoldStandardSpec:
    """A gold-standard method a config may name: ``fn`` (``"module:function"``, imported when
    called, a :data:`Combine`) fuses one session's raters; None for ``stored``, which reads the
    store's ``/labels/<target>``. ``doc`` is its line in docs/config.md."""

    name: str
    fn: str | None
    doc: str = ""

    def function(self) -> Combine:
        """The method's :data:`Combine` (imported now); ValueError for ``stored``."""
        if self.fn is None:
            raise ValueError(f"method {self.name!r} reads /labels/<target>; nothing to combine")
        module, _, name = self.fn.partition(":")
        return getattr(importlib.import_module(module), name)

    def combine(self, traces: Mapping[str, Any]) -> tuple[Any, dict[str, float]]:
        """The gold standard of one session's (lag-aligned) raters' ``traces`` and their weights."""
        return self.function()(traces)


#: the gold-standard methods a config may name (:meth:`~.choices.Registry.get` raises with the
#: nearest name)
GOLD_STANDARDS: Registry[GoldStandardSpec] = Registry("gold-standard method")
register_gold_standard, unregister_gold_standard = (
    GOLD_STANDARDS.register,
    GOLD_STANDARDS.unregister,
)
get_gold_standard = GOLD_STANDARDS.get

_DATA = "experiments.data.gold_standard"
for _spec in (
    GoldStandardSpec("stored", None, "the store's `/labels/<target>` as extracted"),
    GoldStandardSpec("mean", f"{_DATA}:mean_fusion", "the mean of the session's raters"),
    GoldStandardSpec(
        "ewe",
        f"{_DATA}:ewe_fusion",
        "the evaluator-weighted estimate: each rater weighted by its Pearson r with the mean of "
        "the others (clipped at 0)",
    ),
    GoldStandardSpec(
        "mean_z",
        f"{_DATA}:mean_z_fusion",
        "each rater z-normalised on the session, averaged, then given the raters' mean level and "
        "spread again (a rater's own offset and range removed)",
    ),
    GoldStandardSpec(
        "ccc_centred",
        f"{_DATA}:ccc_centred_fusion",
        "AVEC 2018's: each rater centred on its own mean, weighted by the CCC of its centred trace "
        "with the mean of the others' (clipped at 0), plus the weighted mean of the raters' means",
    ),
):
    register_gold_standard(_spec)


def methods() -> tuple[str, ...]:
    """The registered method names, in registration order."""
    return tuple(GOLD_STANDARDS.all())


@dataclass(frozen=True)
class GoldStandard:
    """The config's ``gold_standard`` mapping."""

    method: str = "stored"
    align_lags: bool = False
    max_lag_s: float = 5.0

    def __post_init__(self) -> None:
        if self.method not in GOLD_STANDARDS.all():
            raise ValueError(
                f"gold_standard.method {self.method!r} is not one of {', '.join(methods())}"
            )
        if not self.max_lag_s >= 0:
            raise ValueError(f"gold_standard.max_lag_s {self.max_lag_s} must be >= 0 seconds")

    @property
    def spec(self) -> GoldStandardSpec:
        """The registered method."""
        return get_gold_standard(self.method)

    def to_dict(self) -> dict:
        return asdict(self)


def gold_standard_of(text: str) -> GoldStandard:
    """The :class:`GoldStandard` of a trial's ``gold_standard`` param (``gold_standard_text``'s inverse).

    >>> gold_standard_of("ewe,align_lags,max_lag_s=3")
    GoldStandard(method='ewe', align_lags=True, max_lag_s=3.0)
    """
    method, *rest = text.split(",")
    lag = [float(p.partition("=")[2]) for p in rest if p.startswith("max_lag_s=")]
    return GoldStandard(method, "align_lags" in rest, *lag)
