"""Fits made once for the steps after a sweep that refit one fit group (importance, late fusion):
keyed by everything a fit reads, a :class:`FitCache` hands back what a refit would give.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from ..config.grid import Trial
from ..windowing.windowed import WindowedSession
from . import fitting  # its functions looked up at call time (the tests count the fits)
from .fitting import FitPart, PartResult, _ids, _Model, _recorded, _replay


def _copied(result: PartResult) -> PartResult:
    return PartResult(
        {k: v.copy() for k, v in result.predictions.items()},
        {k: v.copy() for k, v in result.in_sample.items()},
        result.n_rows,
        result.seconds,
        list(result.warnings),
    )


class FitCache:
    """Fits made once, viewed per windowed feature set by :meth:`on`; ``fits``: made, ``reuses``:
    handed out again (every copy a new array)."""

    def __init__(self) -> None:
        self._models: dict[tuple, tuple[_Model, list[warnings.WarningMessage]]] = {}
        self._parts: dict[tuple, PartResult] = {}
        self.fits = 0
        self.reuses = 0

    def on(self, names: Sequence[str]) -> FitScope:
        return FitScope(self, tuple(names))

    def clear(self) -> None:
        """Forget every fit (not the counts)."""
        self._models.clear()
        self._parts.clear()

    def release(self, names: Sequence[str]) -> None:
        """Forget the fits made on the features ``names``."""
        names = tuple(names)
        for store in (self._models, self._parts):
            for key in [k for k in store if k[0] == names]:
                del store[key]


@dataclass(frozen=True)
class FitScope:
    """A :class:`FitCache` for one windowed feature set (its column ``names``)."""

    cache: FitCache
    names: tuple[str, ...]

    def model(
        self,
        trial: Trial,
        train: Sequence[WindowedSession],
        personalization: str,
        predicted: Sequence[WindowedSession],
    ) -> _Model:
        """The model, fitted on the first request of its key."""
        listeners = (
            frozenset(s.listener for s in predicted) if personalization == "per_listener" else None
        )
        # the fit key (no unseen-listener marks: a fit names its own personalization and
        # sessions), so a configuration and its unseen-listener variant share fits
        key = (self.names, trial.fit_key(), personalization, _ids(train), listeners)
        c = self.cache
        if key in c._models:
            c.reuses += 1
        else:
            fitted, caught = _recorded(
                lambda: fitting._fit(trial, train, personalization, predicted)
            )
            c._models[key] = _Model(trial, fitted, {}), caught
            c.fits += 1
        model, caught = c._models[key]
        _replay(caught)
        return model

    def closed_form(
        self,
        trial: Trial,
        parts: Sequence[FitPart],
        train: Sequence[WindowedSession],
        evaluate: Sequence[WindowedSession],
        need_post_fit: bool,
    ) -> dict[FitPart, PartResult]:
        """:func:`closed_form_parts` of ``parts``, those not made before made together."""
        c = self.cache
        keys = {
            p: (self.names, trial.fit_key(), p, _ids(train), _ids(evaluate), need_post_fit)
            for p in parts
        }
        todo = [p for p in parts if keys[p] not in c._parts]
        made = fitting.closed_form_parts(trial, todo, train, evaluate, need_post_fit)
        for p, result in made.items():
            c._parts[keys[p]] = result
        c.fits += len(made)
        out = {p: _copied(c._parts[keys[p]]) for p in parts if keys[p] in c._parts}
        c.reuses += len(out) - len(made)
        return out
