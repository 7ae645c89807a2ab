"""The config's ``fusion`` section: late fusion (a blend of each member feature set's chosen
configuration, fitted on the training stories' out-of-fold predictions:
:mod:`experiments.evaluation.fusion`) beside early fusion (a set listing several roles'
channels); ``experiments ablate`` reports it as the row :data:`FUSED_SET`.

>>> fusion_config({"method": "late", "members": ["speaker", "listener"]}, ["speaker", "listener"], "val", ValueError)
FusionConfig(method='late', members=['speaker', 'listener'], blend='nnls', alpha=0.01)
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .options import BLENDS, FUSION_METHODS, ConfigWarning

#: the name of late fusion's row in the ablation table (beside the feature sets)
FUSED_SET = "late fusion"


@dataclass
class FusionConfig:
    """Late fusion (see the module docstring): ``method`` ``none`` (off) or one of
    :data:`~experiments.config.options.FUSION_METHODS`; ``members``: the feature sets whose chosen
    configurations are blended; ``blend``: one of :data:`~experiments.config.options.BLENDS`;
    ``alpha``: the ridge blend's penalty per training frame (unitless; ignored by ``nnls``)."""

    method: str = "none"
    members: list[str] = field(default_factory=list)
    blend: str = "nnls"
    alpha: float = 0.01

    @property
    def enabled(self) -> bool:
        return self.method != "none"

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "members": list(self.members),
            "blend": self.blend,
            "alpha": self.alpha,
        }


def _suggest(word: Any, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(word), list(valid), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(valid)}"


def fusion_config(
    value: Any,
    swept: Sequence[str],
    protocol: str,
    fail: Callable[[str, str], Exception],
    defined: Sequence[str] | None = None,
) -> FusionConfig:
    """The ``fusion`` mapping checked against the swept feature sets ``swept``, those ``defined``
    (default: ``swept``) and the ``protocol``; ``fail(key, message)`` makes the error. A member
    defined but not swept, or a protocol other than ``val``, turns fusion off with a
    :class:`ConfigWarning` that says why.

    Raises:
        ``fail``'s error: an unknown key, method or blend; fewer than two members, one that is no
        feature set, one twice; ``alpha`` not a number >= 0; a feature set named like the fused row.
    """
    if value is None or value is False:  # off, as `importance: false` is
        return FusionConfig()
    if not isinstance(value, dict):
        raise fail(
            "fusion",
            f"expected a mapping {{method: late, members: [...]}} or false (off), got {value!r}",
        )
    allowed = ["method", "members", "blend", "alpha"]
    for k in value:
        if k not in allowed:
            raise fail(f"fusion.{k}", f"unknown key{_suggest(k, allowed)}")
    method = value.get("method", "late")
    if method in ("none", None, False):
        return FusionConfig()
    if method not in FUSION_METHODS:
        hint = (
            "; early fusion is a feature set listing both roles' channels (e.g. both)"
            if method == "early"
            else _suggest(method, FUSION_METHODS)
        )
        raise fail(
            "fusion.method", f"{method!r} is not one of none, {', '.join(FUSION_METHODS)}{hint}"
        )
    members = value.get("members")
    if not isinstance(members, list) or len(members) < 2:
        raise fail(
            "fusion.members",
            f"expected at least two feature sets to blend, e.g. [speaker, listener]; got {members!r}",
        )
    known = list(defined) if defined is not None else list(swept)
    for m in members:
        if m not in known:
            raise fail(
                "fusion.members",
                f"{m!r} is not a feature set (feature_sets: {', '.join(known)}){_suggest(m, known)}",
            )
    if len(set(members)) != len(members):
        raise fail("fusion.members", f"a feature set is listed twice in {members}")
    if FUSED_SET in swept:
        raise fail(
            "feature_sets", f"{FUSED_SET!r} names the late-fusion row; rename that feature set"
        )
    blend = value.get("blend", "nnls")
    if blend not in BLENDS:
        raise fail(
            "fusion.blend", f"{blend!r} is not one of {', '.join(BLENDS)}{_suggest(blend, BLENDS)}"
        )
    alpha = value.get("alpha", FusionConfig.alpha)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not alpha >= 0:
        raise fail(
            "fusion.alpha", f"expected a number >= 0 (the ridge penalty per frame), got {alpha!r}"
        )
    off = [m for m in members if m not in swept]
    why = (
        f"member {', '.join(map(repr, off))} is not swept (feature_set: {', '.join(swept)})"
        if off
        else f"protocol {protocol}: the blend is fitted on the training stories' out-of-fold "
        "predictions and applied to validation and test, which needs protocol val"
        if protocol != "val"
        else ""
    )
    if why:
        warnings.warn(
            f"late fusion off: {why}; sweep every member under protocol val to get the row "
            "(or set fusion.method=none to silence this)",
            ConfigWarning,
            stacklevel=2,
        )
        return FusionConfig()
    return FusionConfig("late", [str(m) for m in members], str(blend), float(alpha))
