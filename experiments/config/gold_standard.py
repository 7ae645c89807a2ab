"""The config's ``gold_standard`` setting: which labels the experiments train and score on
(the combining itself is :mod:`experiments.data.gold_standard`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

METHODS = ("stored", "mean", "ewe")


@dataclass(frozen=True)
class GoldStandard:
    """The config's ``gold_standard`` mapping."""

    method: str = "stored"
    align_lags: bool = False
    max_lag_s: float = 5.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"gold_standard.method {self.method!r} is not one of {', '.join(METHODS)}"
            )
        if not self.max_lag_s >= 0:
            raise ValueError(f"gold_standard.max_lag_s {self.max_lag_s} must be >= 0 seconds")

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
