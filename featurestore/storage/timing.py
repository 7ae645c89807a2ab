"""When a stored channel was sampled and how far ahead of its time stamps it reads.

A row of a channel stands for the instant ``time``, but what computed it may have read the
source a little later: eGeMAPS analyses 60 ms of audio starting at ``time``, the per-role voice
rule a centred window of mouth movement. The group attribute ``lookahead_s`` (seconds; ``inf``:
the whole session) records that, written by whatever wrote the channel (extraction, the
derived rules, ``featurestore import --lookahead-s``); the experiments add it to a
configuration's look-ahead (:mod:`experiments.data.lookahead`), which decides whether the
configuration is tagged causal. A channel without the attribute (imported without a declared
look-ahead, or written before the attribute existed) has an unknown look-ahead: readers that
cannot derive it from the extractor's version (:func:`featurestore.extractors.known_lookahead_s`)
count it as ``inf``. Adding the attribute changed no other part of the layout: shards without
it read as before.
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
