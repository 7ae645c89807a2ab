"""When a stored channel was sampled and how far ahead of its time stamps it reads.

The group attribute ``lookahead_s`` (seconds; ``inf``: the whole session) records how far after
a row's ``time`` what computed it read of the source; a channel without it has an unknown
look-ahead (docs/channels.md, how far ahead each channel reads).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .shard import ShardReader, recorded_lookahead


@dataclass(frozen=True)
class ChannelTiming:
    """A stored channel without its data: ``time`` (n,) seconds, ``valid`` (n,) bool, what wrote
    it (``extractor``, ``extractor_version``, ``params``) and its recorded ``lookahead_s``
    (seconds; None when the shard records none)."""

    time: np.ndarray
    valid: np.ndarray
    extractor: str
    extractor_version: str
    params: dict
    lookahead_s: float | None


def channel_timing(shard: ShardReader, key: str) -> ChannelTiming:
    """The :class:`ChannelTiming` of ``role/channel`` in an open shard (its ``data`` is not read);
    :class:`~featurestore.storage.shard.MissingChannelError` when the shard lacks it."""
    shard.require_channels([key])
    g = shard.file[key]
    a = g.attrs
    return ChannelTiming(
        time=np.asarray(g["time"][()], dtype=np.float64),
        valid=np.asarray(g["valid"][()], dtype=bool),
        extractor=str(a.get("extractor", "")),
        extractor_version=str(a.get("extractor_version", "")),
        params=json.loads(a.get("params", "{}")),
        lookahead_s=recorded_lookahead(a),
    )
