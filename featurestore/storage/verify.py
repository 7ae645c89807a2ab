"""The checks of ``featurestore verify`` on one open shard (:meth:`featurestore.storage.store.Store.verify` opens it).

Per shard: root attributes and schema version; per channel, data, time and valid have one
row each and as many columns as names, times are finite, non-decreasing and inside the
session, rows marked valid hold finite values, the stored cache key matches its provenance,
the extractor version is the current one, and the source file (where it still exists) has
the fingerprint the channel was computed from; labels have ``n_frames`` rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .provenance import cache_key, file_fingerprint
from .shard import ROLES, SCHEMA_VERSION, ShardReader, StoreError, read_channel_group

REBUILD = "re-run `featurestore extract --force`"


@dataclass
class Problem:
    """One finding of :meth:`featurestore.storage.store.Store.verify`."""

    session: str
    what: str
    hint: str = ""

    def __str__(self) -> str:
        return f"{self.session}: {self.what}" + (f" ({self.hint})" if self.hint else "")


def verify_shard(
    s: str, shard: ShardReader, versions: Mapping[str, str], check_sources: bool, fp_cache: dict
) -> list[Problem]:
    """Problems of session ``s``'s open shard; ``versions``: extractor name -> current version;
    ``fp_cache``: source path -> fingerprint, shared across shards (a video is hashed once)."""
    f = shard.file
    try:
        meta = shard.meta
    except StoreError as e:
        return [Problem(s, str(e))]
    out: list[Problem] = []
    if int(f.attrs["schema_version"]) != SCHEMA_VERSION:
        out.append(
            Problem(
                s,
                f"schema version {int(f.attrs['schema_version'])}, expected {SCHEMA_VERSION}",
                "move the file aside and re-run `featurestore extract` to rebuild it",
            )
        )
    duration = meta.n_frames / meta.fps
    for role in ROLES:
        if role not in f:
            continue
        for name in f[role]:
            out.extend(
                _channel_problems(
                    s, f"{role}/{name}", f[role][name], duration, versions, check_sources, fp_cache
                )
            )
    if "labels" in f:
        for t in f["labels"]:
            if len(f["labels"][t]) != meta.n_frames:
                out.append(
                    Problem(
                        s,
                        f"labels/{t}: {len(f['labels'][t])} rows, session has {meta.n_frames} frames",
                    )
                )
    if "raters" in f:
        for t in f["raters"]:
            for r in f["raters"][t]:
                if len(f["raters"][t][r]) != meta.n_frames:
                    out.append(
                        Problem(
                            s,
                            f"raters/{t}/{r}: {len(f['raters'][t][r])} rows, session has "
                            f"{meta.n_frames} frames",
                        )
                    )
    for t in f["session_labels"] if "session_labels" in f else []:
        ds = f["session_labels"][t]
        if ds.shape != () or not np.isfinite(ds[()]):
            out.append(
                Problem(
                    s,
                    f"session_labels/{t}: not one finite number ({ds[()]!r})",
                    "re-import it: `featurestore ratings FILE` or the manifest's rating column",
                )
            )
    return out


def _channel_problems(
    s: str,
    key: str,
    grp: Any,
    duration: float,
    versions: Mapping[str, str],
    check_sources: bool,
    fp_cache: dict,
) -> list[Problem]:
    try:
        shapes = [grp[d].shape for d in ("data", "time", "valid")]
    except KeyError as e:
        return [Problem(s, f"{key}: missing dataset ({e})", REBUILD)]
    if not (shapes[0][:1] == shapes[1] == shapes[2]):
        return [
            Problem(
                s,
                f"{key}: {shapes[0][0]} data rows, {shapes[1][0]} times, {shapes[2][0]} valid flags",
                REBUILD,
            )
        ]
    try:
        ch = read_channel_group(grp)
    except Exception as e:  # noqa: BLE001 - any read failure is a finding
        return [Problem(s, f"{key} unreadable ({e.__cause__ or e})", REBUILD)]
    out: list[Problem] = []
    if len(ch.time):
        if not np.all(np.isfinite(ch.time)):
            out.append(Problem(s, f"{key}: non-finite time stamps"))
        elif np.any(np.diff(ch.time) < 0):
            out.append(Problem(s, f"{key}: time stamps go backwards"))
        elif ch.time[0] < -1e-6 or ch.time[-1] > duration + 1.0:
            out.append(
                Problem(
                    s,
                    f"{key}: times {ch.time[0]:.2f}-{ch.time[-1]:.2f} s outside the session (0-{duration:.2f} s)",
                )
            )
        bad = ch.valid & ~np.all(np.isfinite(ch.data), axis=1)
        if bad.any():
            out.append(Problem(s, f"{key}: {int(bad.sum())} rows marked valid hold NaN/inf"))
    if ch.cache_key and ch.source:
        upstream = ch.source.get("upstream")
        expect = cache_key(
            upstream if upstream is not None else ch.source,
            ch.extractor,
            ch.extractor_version,
            ch.params,
        )
        if expect != ch.cache_key:
            out.append(Problem(s, f"{key}: cache key does not match its provenance", REBUILD))
    want = versions.get(ch.extractor)
    if want is not None and want != ch.extractor_version:
        out.append(
            Problem(
                s,
                f"{key}: made by {ch.extractor} {ch.extractor_version}, current is {want}",
                "re-run `featurestore extract`",
            )
        )
    sp = ch.source.get("path")
    if check_sources and sp and ch.source.get("fingerprint") and Path(sp).exists():
        if sp not in fp_cache:
            fp_cache[sp] = file_fingerprint(sp)
        if fp_cache[sp]["fingerprint"] != ch.source["fingerprint"]:
            out.append(
                Problem(
                    s,
                    f"{key}: source {sp} changed since extraction",
                    "re-run `featurestore extract`",
                )
            )
    return out
