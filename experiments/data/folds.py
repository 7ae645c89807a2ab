"""Cross-validation folds over sessions (anything with ``listener`` and ``story`` ids): whole persons or whole
stories held out, the sorted ids dealt to the folds in turn.

>>> from types import SimpleNamespace as S
>>> ss = [S(listener=l, story=s) for l in (1, 2, 3) for s in (1, 2)]
>>> [[(x.listener, x.story) for x in held] for held in cv_folds(ss, "lopo")]
[[(1, 1), (1, 2)], [(2, 1), (2, 2)], [(3, 1), (3, 2)]]
>>> [sorted({x.listener for x in held}) for held in cv_folds(ss, "kfold_person", folds=2)]
[[1, 3], [2]]
>>> [sorted({x.story for x in held}) for held in cv_folds(ss, "loso")]
[[1], [2]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from ..config.options import CV_PROTOCOLS

S = TypeVar("S")

#: protocol -> the session attribute whose values are held out together
HELD_OUT_BY = {
    "loso": "story",
    "kfold_group": "story",
    "lopo": "listener",
    "kfold_person": "listener",
}


def cv_folds(sessions: Sequence[S], protocol: str, folds: int = 0) -> list[list[S]]:
    """The held-out sessions of each fold of ``protocol``; ``folds``: of a k-fold protocol (at least 2)."""
    if protocol not in CV_PROTOCOLS:
        raise ValueError(f"protocol {protocol!r} is not a cross-validation: one of {CV_PROTOCOLS}")
    attr = HELD_OUT_BY[protocol]
    ids = sorted({getattr(s, attr) for s in sessions})
    if protocol.startswith("kfold"):
        if folds < 2:
            raise ValueError(f"protocol {protocol} needs folds >= 2, got {folds}")
        k = min(folds, len(ids))
        fold_of = {v: i % k for i, v in enumerate(ids)}
    else:
        k = len(ids)
        fold_of = {v: i for i, v in enumerate(ids)}
    out: list[list[S]] = [[] for _ in range(k)]
    for s in sessions:
        out[fold_of[getattr(s, attr)]].append(s)
    return out
