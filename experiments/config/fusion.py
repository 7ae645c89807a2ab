"""The config's ``fusion`` section: late fusion (a blend of the member feature sets' chosen
configurations, :mod:`experiments.evaluation.fusion`; docs/config.md, Late fusion).

>>> fusion_config({"method": "late", "members": ["speaker", "listener"]}, ["speaker", "listener"], "val", ValueError)
FusionConfig(method='late', members=['speaker', 'listener'], blend='nnls', alpha=0.01)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .choices import suggest
from .options import BLENDS, FUSION_METHODS, ConfigWarning

#: the name of late fusion's row in the ablation table (beside the feature sets)
FUSED_SET = "late fusion"


@dataclass
class FusionConfig:
    """Late fusion: ``method`` ``none`` (off) or ``late``, the ``members`` blended, the ``blend``
    and ``alpha``, the ridge blend's penalty per training frame."""

    method: str = "none"
    members: list[str] = field(default_factory=list)
    blend: str = "nnls"
    alpha: float = 0.01

    @property
    def enabled(self) -> bool:
        return self.method != "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fusion_config(
    value: Any,
    swept: Sequence[str],
    protocol: str,
    fail: Callable[[str, str], Exception],
    defined: Sequence[str] | None = None,
) -> FusionConfig:
    """The ``fusion`` mapping checked against the feature sets ``swept`` and ``defined``
    (default: ``swept``) and the ``protocol``; ``fail(key, message)`` makes the error. A member
    not swept, or a protocol other than ``val``, turns fusion off with a :class:`ConfigWarning`."""
    if value is None or value is False:  # off, as `importance: false` is
        return FusionConfig()
    if not isinstance(value, dict):
        expected = "expected a mapping {method: late, members: [...]} or false (off)"
        raise fail("fusion", f"{expected}, got {value!r}")
    allowed = ["method", "members", "blend", "alpha"]
    for k in [k for k in value if k not in allowed]:
        raise fail(f"fusion.{k}", f"unknown key{suggest(k, allowed)}")
    method = value.get("method", "late")
    if method in ("none", None, False):
        return FusionConfig()
    if method not in FUSION_METHODS:
        early = "; early fusion is a feature set listing both roles' channels (e.g. both)"
        hint = early if method == "early" else suggest(method, FUSION_METHODS)
        raise fail(
            "fusion.method", f"{method!r} is not one of none, {', '.join(FUSION_METHODS)}{hint}"
        )
    members = _members(
        value.get("members"), swept, list(swept if defined is None else defined), fail
    )
    blend = value.get("blend", "nnls")
    if blend not in BLENDS:
        raise fail(
            "fusion.blend", f"{blend!r} is not one of {', '.join(BLENDS)}{suggest(blend, BLENDS)}"
        )
    alpha = value.get("alpha", FusionConfig.alpha)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 <= alpha < math.inf:
        expected = "expected a number >= 0 (the ridge penalty per frame)"
        raise fail("fusion.alpha", f"{expected}, got {alpha!r}")
    if why := _off(members, swept, protocol):
        warnings.warn(
            f"late fusion off: {why}; sweep every member under protocol val to get the row "
            "(or set fusion.method=none to silence this)",
            ConfigWarning,
            stacklevel=2,
        )
        return FusionConfig()
    return FusionConfig("late", members, str(blend), float(alpha))


def _members(
    members: Any, swept: Sequence[str], known: list[str], fail: Callable[[str, str], Exception]
) -> list[str]:
    """``fusion.members``: two or more feature sets the config defines, each once."""
    if not isinstance(members, list) or len(members) < 2:
        example = "expected at least two feature sets to blend, e.g. [speaker, listener]"
        raise fail("fusion.members", f"{example}; got {members!r}")
    for m in [m for m in members if m not in known]:
        known_sets = f"(feature_sets: {', '.join(known)}){suggest(m, known)}"
        raise fail("fusion.members", f"{m!r} is not a feature set {known_sets}")
    if len(set(members)) != len(members):
        raise fail("fusion.members", f"a feature set is listed twice in {members}")
    if FUSED_SET in swept:
        raise fail(
            "feature_sets", f"{FUSED_SET!r} names the late-fusion row; rename that feature set"
        )
    return [str(m) for m in members]


def _off(members: list[str], swept: Sequence[str], protocol: str) -> str:
    """Why late fusion is off for this sweep, or ""."""
    if off := [m for m in members if m not in swept]:
        return f"member {', '.join(map(repr, off))} is not swept (feature_set: {', '.join(swept)})"
    if protocol != "val":
        return (
            f"protocol {protocol}: the blend is fitted on the training stories' out-of-fold "
            "predictions and applied to validation and test, which needs protocol val"
        )
    return ""
