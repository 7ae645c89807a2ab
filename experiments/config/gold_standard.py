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
