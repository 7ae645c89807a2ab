"""How far after a label frame each channel of a store reads: its extraction's look-ahead (docs/channels.md) plus
its resampling's, the largest over the sessions, rounded up to the microsecond. It enters a configuration's logged
``lookahead_s`` and ``causal``, not its hash."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from featurestore.extractors import known_lookahead_s
from featurestore.storage.store import Store

from ..config.grid import Trial
from .dataset import MAX_GAP_S, resampling_lookahead_s


@dataclass(frozen=True)
class ChannelLookahead:
    """How far after a label frame one channel reads (seconds, the largest over the sessions; ``inf``: unknown)."""

    key: str
    extraction_s: float
    resampling_s: float
    total_s: float
    unknown: tuple[str, ...]


def _ceil_us(x: float) -> float:
    """``x`` seconds rounded up to the microsecond (float noise of 0.5 + 0.02 is no look-ahead)."""
    return math.ceil(round(x * 1e6, 3)) / 1e6 if math.isfinite(x) else x


def channel_lookaheads(
    store: Store | str | os.PathLike,
    keys: Sequence[str],
    sessions: Sequence[str] | None = None,
    max_gap_s: float = MAX_GAP_S,
) -> dict[str, ChannelLookahead]:
    """Key -> :class:`ChannelLookahead` of each of ``keys`` over ``sessions`` (default: all); ``inf`` if none."""
    st = store if isinstance(store, Store) else Store(store)
    names = list(sessions) if sessions is not None else st.list_sessions()
    ext = dict.fromkeys(keys, -math.inf)
    res = dict.fromkeys(keys, -math.inf)
    tot = dict.fromkeys(keys, -math.inf)
    unknown: dict[str, list[str]] = {k: [] for k in keys}
    seen = dict.fromkeys(keys, False)
    for s in names:
        with st.open_session(s) as shard:
            meta = shard.meta
            for key in keys:
                if not shard.has_channel(key):
                    continue
                seen[key] = True
                c = shard.timing(key)
                e = known_lookahead_s(c.extractor, c.extractor_version, c.params, c.lookahead_s)
                if e is None:
                    unknown[key].append(s)
                    e = math.inf
                r = resampling_lookahead_s(c.time, c.valid, meta.n_frames, meta.fps, max_gap_s)
                ext[key], res[key] = max(ext[key], e), max(res[key], r)
                tot[key] = max(tot[key], e + r)
    for k in keys:
        if not seen[k]:  # no session has it: unknown
            ext[k] = tot[k] = math.inf
    return {
        k: ChannelLookahead(k, ext[k], res[k], _ceil_us(tot[k]), tuple(unknown[k])) for k in keys
    }


def unknown_note(lookaheads: Mapping[str, ChannelLookahead]) -> str | None:
    """A warning naming the channels whose look-ahead some session does not record; None when all are known."""
    bad = {k: la.unknown for k, la in lookaheads.items() if la.unknown}
    if not bad:
        return None
    listed = "; ".join(f"{k} ({len(v)} sessions, e.g. {v[0]})" for k, v in sorted(bad.items()))
    return (
        f"no recorded look-ahead for {listed}: counted as reading the whole session, so no "
        "configuration reading them is tagged causal. Channels written by `featurestore extract` "
        "record it (re-run it: the per-role voice and transcript channels are re-derived from "
        "the stored ones); an imported channel declares it with `featurestore import "
        "--lookahead-s S`"
    )


def with_channel_lookahead(
    trials: Sequence[Trial], lookaheads: Mapping[str, ChannelLookahead]
) -> list[Trial]:
    """``trials`` with ``channel_lookahead_s`` the largest ``total_s`` of their channels."""
    return [
        replace(t, channel_lookahead_s=max(lookaheads[c].total_s for c in t.channels))
        for t in trials
    ]
