"""Whole-session ratings (one number per session and target) in an open shard:
``/session_labels/<target>`` (the mean over raters) and ``/session_raters/<target>/<rater>``
(docs/store.md). ``ratings`` are ``target -> rater -> value``, rater ``""`` for none.

>>> rating_value({"": 3.0}), rating_value({"a": 2.0, "b": 4.0})
(3.0, 3.0)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import h5py
import numpy as np

from . import checksums
from .checksums import read_rows

GROUP = "session_labels"
RATERS_GROUP = "session_raters"

Ratings = Mapping[str, Mapping[str, float]]


def rating_value(by_rater: Mapping[str, float]) -> float:
    """The stored rating of one target: the mean over its raters (the one value without raters)."""
    values = [float(v) for v in by_rater.values()]
    return float(np.mean(values)) if values else math.nan


def session_label_targets(f: h5py.File) -> list[str]:
    """The targets with a whole-session rating in an open shard, sorted."""
    return sorted(f[GROUP]) if GROUP in f else []


def read_session_label(f: h5py.File, target: str) -> float | None:
    """The rating of ``target`` in an open shard; None when it has none."""
    if GROUP not in f or target not in f[GROUP]:
        return None
    return float(read_rows(f[GROUP][target]))


def read_session_raters(f: h5py.File, target: str) -> dict[str, float]:
    """Rater -> rating of ``target`` in an open shard (empty without raters or rating)."""
    if RATERS_GROUP not in f or target not in f[RATERS_GROUP]:
        return {}
    g = f[RATERS_GROUP][target]
    return {r: float(read_rows(g[r])) for r in sorted(g)}


def read_ratings(f: h5py.File) -> dict[str, dict[str, float]]:
    """Every stored rating as ``target -> rater -> value`` (rater ``""`` without raters), the
    shape :func:`write_session_labels` takes: equal when nothing changed."""
    out: dict[str, dict[str, float]] = {}
    for t in session_label_targets(f):
        out[t] = read_session_raters(f, t) or {"": float(read_rows(f[GROUP][t]))}
    return out


def session_label_source(f: h5py.File, target: str) -> dict:
    """Where the rating of ``target`` came from (the ``source`` attribute), {} without one."""
    if GROUP not in f or target not in f[GROUP]:
        return {}
    return json.loads(f[GROUP][target].attrs.get("source", "{}"))


def check_ratings(ratings: Ratings, where: str | Path = "") -> None:
    """ValueError for a target or rater that cannot be an HDF5 name, a rating that is not a
    finite number, or a target mixing a rating without a rater with raters."""
    at = f"{where}: " if where else ""
    for target, by_rater in ratings.items():
        if not target or "/" in target or target.strip() != target:
            raise ValueError(f"{at}rating target {target!r} must be one non-empty word without '/'")
        if "" in by_rater and len(by_rater) > 1:
            raise ValueError(
                f"{at}rating {target!r} is given both without a rater and per rater "
                f"({', '.join(sorted(r for r in by_rater if r))}); give one or the other"
            )
        for rater, v in by_rater.items():
            if "/" in rater or rater.strip() != rater:
                raise ValueError(f"{at}rater name {rater!r} of {target!r} must not hold '/'")
            if not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                raise ValueError(
                    f"{at}rating {target!r} ({rater or 'no rater'}) is {v!r}, not a finite number"
                )


def write_session_labels(f: h5py.File, ratings: Ratings, source: Mapping) -> None:
    """Replace the ratings of the targets in ``ratings`` in an open shard (other targets stay);
    nothing is written when :func:`check_ratings` refuses them."""
    check_ratings(ratings)
    labels = f.require_group(GROUP)
    raters_root = f.require_group(RATERS_GROUP)
    for target, by_rater in ratings.items():
        if target in labels:
            del labels[target]
        if target in raters_root:
            del raters_root[target]
        ds = checksums.create(labels, target, np.float64(rating_value(by_rater)))
        named = sorted(r for r in by_rater if r)
        ds.attrs["raters"] = json.dumps(named)
        ds.attrs["source"] = json.dumps(dict(source), sort_keys=True)
        if named:
            g = raters_root.create_group(target)
            for r in named:
                checksums.create(g, r, np.float64(by_rater[r]))
    if not len(raters_root):
        del f[RATERS_GROUP]
