"""The checks of ``featurestore verify`` on one open shard (docs/store.md lists them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from . import checksums
from .errors import DamagedShardError
from .provenance import cache_key, file_fingerprint
from .roles import STORE_ROLES
from .shard import READABLE_SCHEMAS, SCHEMA_VERSION, ShardReader, StoreError, read_channel_group

REBUILD = "re-run `featurestore extract --force`"


@dataclass
class Problem:
    """One finding of :meth:`featurestore.storage.store.Store.verify`."""

    session: str
    what: str
    hint: str = ""

    def __str__(self) -> str:
        return f"{self.session}: {self.what}" + (f" ({self.hint})" if self.hint else "")


def missing_shards(
    root: Path, have: Sequence[str], expected: Sequence[str], corpus: str
) -> list[Problem]:
    """A problem per session of ``expected`` (those the file ``corpus`` lists) not in ``have``."""
    fix = (
        "re-run `featurestore extract` (it resumes; a session that fails says why), or "
        "`featurestore scan` again if the corpus changed"
    )
    present = set(have)
    return [
        Problem(s, f"no shard {root / f'{s}.h5'}, though {corpus} lists the session", fix)
        for s in expected
        if s not in present
    ]


def verify_shard(
    s: str, shard: ShardReader, versions: Mapping[str, str], check_sources: bool, fp_cache: dict
) -> list[Problem]:
    """Problems of session ``s``'s open shard; ``versions``: extractor name -> current version;
    ``fp_cache``: source path -> fingerprint, shared across shards (a video is hashed once)."""
    f = shard.file
    if outside := checksums.outside_parts(f):  # checked first: every other check reads rows
        return [Problem(s, f"{shard.path.name}: {what}", checksums.OUTSIDE_FIX) for what in outside]
    try:
        meta = shard.meta
    except StoreError as e:
        return [Problem(s, str(e))]
    out: list[Problem] = []
    if (version := int(f.attrs["schema_version"])) != SCHEMA_VERSION:
        fix = "move the file aside and re-run `featurestore extract` to rebuild it"
        what = f"schema version {version}, expected {SCHEMA_VERSION}"
        if version in READABLE_SCHEMAS and version < checksums.FIRST_CHECKED_SCHEMA:
            what += ": its datasets carry no checksums, so edits cannot be detected"
            fix += " with them"
        out.append(Problem(s, what, fix))
    out += _checksum_problems(s, shard)
    duration = meta.n_frames / meta.fps
    for key in (f"{r}/{c}" for r in STORE_ROLES if r in f for c in f[r]):
        out += _channel_problems(s, key, f[key], duration, versions, check_sources, fp_cache)
    if check_sources:
        for label, src in shard.label_sources().items():
            out += _source_problems(s, f"labels {label}", src, fp_cache)
    traces = [f"labels/{t}" for t in shard.label_targets()]
    traces += [f"raters/{t}/{r}" for t in f.get("raters", {}) for r in f["raters"][t]]
    for name in traces:
        if (n := len(f[name])) != meta.n_frames:
            out.append(Problem(s, f"{name}: {n} rows, session has {meta.n_frames} frames"))
    out += _content_problems(s, shard)
    for t in f["session_labels"] if "session_labels" in f else []:
        ds = f["session_labels"][t]
        if ds.shape != () or not np.isfinite(ds[()]):
            fix = "re-import it: `featurestore ratings FILE` or the manifest's rating column"
            out.append(Problem(s, f"session_labels/{t}: not one finite number ({ds[()]!r})", fix))
    return out


def _checksum_problems(s: str, shard: ShardReader) -> list[Problem]:
    """A problem per dataset that fails its checksum (:func:`.checksums.problem`)."""
    out: list[Problem] = []

    def check(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset) and (why := checksums.problem(obj)):
            out.append(Problem(s, f"{shard.path.name}: dataset {name} {why}", checksums.REEXTRACT))

    shard.file.visititems(check)
    return out


def time_problem(time: np.ndarray, duration: float) -> str:
    """Why a channel's ``time`` stamps do not fit a session of ``duration`` seconds ('' when they
    do): extract refuses such a channel before writing, ``verify`` reports one it finds."""
    if not len(time):
        return ""
    if not np.all(np.isfinite(time)):
        return "non-finite time stamps"
    if np.any(np.diff(time) < 0):
        return "time stamps go backwards"
    if time[0] < -1e-6 or time[-1] > duration + 1.0:
        return f"times {time[0]:.2f}-{time[-1]:.2f} s outside the session (0-{duration:.2f} s)"
    return ""


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
        rows = f"{shapes[0][0]} data rows, {shapes[1][0]} times, {shapes[2][0]} valid flags"
        return [Problem(s, f"{key}: {rows}", REBUILD)]
    try:
        ch = read_channel_group(grp)
    except DamagedShardError:  # reported, dataset by dataset, by _checksum_problems
        return []
    except Exception as e:  # noqa: BLE001 - any read failure is a finding
        return [Problem(s, f"{key} unreadable ({e.__cause__ or e})", REBUILD)]
    out: list[Problem] = []
    if len(ch.time):
        if why := time_problem(ch.time, duration):
            out.append(Problem(s, f"{key}: {why}"))
        bad = ch.valid & ~np.all(np.isfinite(ch.data), axis=1)
        if bad.any():
            out.append(Problem(s, f"{key}: {int(bad.sum())} rows marked valid hold NaN/inf"))
    if ch.cache_key and ch.source:
        upstream = ch.source.get("upstream")
        source = upstream if upstream is not None else ch.source
        if cache_key(source, ch.extractor, ch.extractor_version, ch.params) != ch.cache_key:
            out.append(Problem(s, f"{key}: cache key does not match its provenance", REBUILD))
    want = versions.get(ch.extractor)
    if want is not None and want != ch.extractor_version:
        made = f"{key}: made by {ch.extractor} {ch.extractor_version}, current is {want}"
        out.append(Problem(s, made, "re-run `featurestore extract`"))
    if check_sources:
        out += _source_problems(s, key, ch.source, fp_cache)
    return out


def _source_problems(s: str, key: str, source: Mapping, fp_cache: dict) -> list[Problem]:
    """A problem when the source file recorded for ``key`` changed since it was read."""
    sp = source.get("path")
    if not (sp and source.get("fingerprint") and Path(sp).exists()):
        return []
    if sp not in fp_cache:
        fp_cache[sp] = file_fingerprint(sp)
    if fp_cache[sp]["fingerprint"] != source["fingerprint"]:
        changed = f"{key}: source {sp} changed since extraction"
        fix = "re-run `featurestore extract`"
        if key.startswith("labels "):
            fix += "; labels added with `featurestore labels`: re-run that"
        return [Problem(s, changed, fix)]
    return []


def labelled(shard: ShardReader) -> bool:
    """Whether a shard holds labels, per frame or whole-session (one without: a blind test's,
    predict only)."""
    return bool(shard.label_targets() or len(shard.file.get("session_labels", {})))


def _content_problems(s: str, shard: ShardReader) -> list[Problem]:
    """A shard without a channel: nothing to train on or predict from (without labels too: a
    stray file, perhaps)."""
    f = shard.file
    if any(len(f[r]) for r in STORE_ROLES if r in f):
        return []
    hint = (
        "extract its media (`featurestore extract`) or import its features (`featurestore import`)"
    )
    if labelled(shard):
        return [Problem(s, "no media: the shard holds no feature channel", hint)]
    hint += "; if the shard is stray (a file named for no recording), delete it"
    return [Problem(s, "no labels and no media: the shard holds neither", hint)]
