"""How far after a label frame each channel of a store reads: extraction plus resampling.

Per channel and session: its rows read the source up to ``lookahead_s`` after their time (as
the shard records it, else as its extractor declares, else ``inf``; docs/channels.md, how far
ahead each channel reads), and resampling onto the label frames reads the latest sample a frame
uses (:func:`experiments.data.dataset.resampling_lookahead_s`). A channel's look-ahead is the
largest over the sessions of the two added, rounded up to the microsecond;
:func:`with_channel_lookahead` hands each configuration the largest over its channels (it
enters the logged ``lookahead_s`` and ``causal``, not the configuration's hash).

>>> from experiments.config.grid import Trial
>>> t = Trial("listener", ("listener/face_geom",), (4.0,), 1.0, "causal", ("mean",), 0.2,
...           "ridge", (), "global", 0.0, "trailing", "none")
>>> la = {"listener/face_geom": ChannelLookahead("listener/face_geom", 0.0, 0.36, 0.36, ())}
>>> [round(x.lookahead_s, 3) for x in with_channel_lookahead([t], la)]   # 0.36 s - 1 s delay
[-0.64]
"""

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
    """How far after a label frame one channel reads (seconds), the largest over the sessions:
    ``extraction_s`` (``inf`` when a session's is unknown), ``resampling_s``, ``total_s`` (of the
    two added, per session), and the ``unknown`` sessions whose look-ahead is not known."""

    key: str
    extraction_s: float
    resampling_s: float
    total_s: float
    unknown: tuple[str, ...]


def _ceil_us(x: float) -> float:
    """``x`` seconds rounded up to the microsecond (finite values; float noise of a sum such as
    0.5 + 0.02 does not become a look-ahead, and none is rounded away)."""
    return math.ceil(round(x * 1e6, 3)) / 1e6 if math.isfinite(x) else x


def channel_lookaheads(
    store: Store | str | os.PathLike,
    keys: Sequence[str],
    sessions: Sequence[str] | None = None,
    max_gap_s: float = MAX_GAP_S,
) -> dict[str, ChannelLookahead]:
    """Key -> :class:`ChannelLookahead` of each ``role/channel`` of ``keys``, over ``sessions``
    (default: every session of the store; a session without the channel is skipped). Opens
    each shard once and reads the channels' time and valid arrays and attributes, not their
    data. A key no session has gets an unknown (``inf``) look-ahead."""
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
    return {
        k: ChannelLookahead(
            k,
            ext[k] if seen[k] else math.inf,
            res[k],
            _ceil_us(tot[k]) if seen[k] else math.inf,
            tuple(unknown[k]),
        )
        for k in keys
    }


def unknown_note(lookaheads: Mapping[str, ChannelLookahead]) -> str | None:
    """A warning naming the channels whose look-ahead some session does not record, and how to
    record it; None when every one is known."""
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
    """``trials`` with :attr:`~experiments.config.grid.Trial.channel_lookahead_s` set: the
    largest ``total_s`` of their channels (``lookaheads`` must cover them; see
    :func:`channel_lookaheads`)."""
    return [
        replace(t, channel_lookahead_s=max(lookaheads[c].total_s for c in t.channels))
        for t in trials
    ]
