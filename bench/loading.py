"""Loading every channel of the full-size store into the experiment tables vs. CSV and Parquet.

The project path is :func:`experiments.data.dataset.load_sessions` on the full-size synthetic
store (80 sessions, 633,850 frames; every channel: face_geom and face_au per role at 5 fps,
eGeMAPS at 100 Hz for scene, speaker and listener), giving one 25 fps table per session.
It is timed three ways:

* ``loading.store_seconds`` / ``loading.vs_csv`` / ``loading.vs_parquet``: a load with the
  frames cache in place (:mod:`experiments.data.frames_cache`), as every load after the first;
* ``loading.first_load_seconds`` / ``loading.first_load_vs_csv``: the cache emptied first, so
  the load reads the shards, resamples and writes the cache;
* ``loading.uncached_seconds``: ``cache=False``, reading and resampling only.

The three results are checked equal, array for array; ``loading.frames_cache_size`` is the
cache's size on disk against the shards'; ``loading.frames_cache_format`` reads every cache
entry against the cache's old binary layout (:mod:`bench.frames_format`).

The baselines hold the same data as the files a researcher would otherwise keep: one table
per session and channel with a ``time`` column, a ``valid`` column and the feature columns
(the per-role eGeMAPS channels, which repeat the scene's rows, are one table with a
``valid`` column per role, as the store keeps them once), plus ``labels.csv``. They are
written once in the run (cached) and read with ``pandas.read_csv`` (default engine) and
``pandas.read_parquet`` (pyarrow), then resampled by the same
:func:`experiments.data.dataset.resample_channel`; the resulting tables are checked equal to the
store's. All timings are with the files in the page cache (each format is read once before
it is timed, the CSV files are timed once: they are slow).

``loading.read_time_<codec>`` and ``loading.size_<codec>``: the ``data`` datasets of 8 shards
(linked rows once) written with lzf + shuffle and gzip level 1 + shuffle, against the
store's uncompressed contiguous layout (the choice documented in ``featurestore/storage/store.py``).

Goals (issue 5): >= 20x faster than CSV, under 2 s.
"""

from __future__ import annotations

import gc
import json
import shutil
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from experiments.data.dataset import load_sessions, resample_channel
from experiments.data.frames_cache import FOLDER_NAME
from featurestore.storage.store import LABEL_FPS, STORE_ROLES, Store

from . import frames_format, inputs
from .harness import best_time, record

FULL = {"n_sessions": 80, "length_range": None}
QUICK = {"n_sessions": 6, "length_range": (500, 1000)}


def channel_keys(store: Store) -> list[str]:
    """Every ``role/channel`` of the store's first session."""
    return store.channel_keys(store.list_sessions()[0])


def export_tables(store_dir: Path, out: Path, fmt: str) -> Path:
    """Write the store's channels and labels as per-session ``csv`` or ``parquet`` tables (cached).

    Returns the folder; ``manifest.json`` there maps each channel key to its table file and
    valid column.
    """
    folder = out / fmt
    stamp = {
        "what": f"tables.{fmt}",
        "store": json.loads((store_dir / ".bench_stamp.json").read_text()),
    }
    if inputs.cached(folder, stamp):
        return folder
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    store = Store(store_dir)
    manifest: dict[str, dict] = {}
    for s in store.list_sessions():
        sdir = folder / s
        sdir.mkdir()
        tables: dict[str, dict] = {}  # file -> {column: array}
        with h5py.File(store.shard_path(s), "r") as f:
            files_by_rows: dict = {}
            for role in STORE_ROLES:
                for name in f.get(role, {}):
                    g = f[role][name]
                    key = f"{role}/{name}"
                    valid_col = f"valid_{role}" if g["data"].id in files_by_rows else "valid"
                    if g["data"].id not in files_by_rows:
                        fname = f"{role}_{name}.{fmt}"
                        files_by_rows[g["data"].id] = fname
                        cols = [str(c) for c in json.loads(g.attrs["columns"])]
                        data = g["data"][()]
                        tables[fname] = {"time": g["time"][()], "valid": g["valid"][()]}
                        tables[fname].update({c: data[:, j] for j, c in enumerate(cols)})
                    fname = files_by_rows[g["data"].id]
                    tables[fname][valid_col] = g["valid"][()]
                    manifest.setdefault(s, {})[key] = {
                        "file": fname,
                        "valid": valid_col,
                        "columns": json.loads(g.attrs["columns"]),
                    }
            tables["labels." + fmt] = {t: f["labels"][t][()] for t in f["labels"]}
        for fname, cols in tables.items():
            table = pa.table(cols)
            if fmt == "csv":
                pacsv.write_csv(table, sdir / fname)
            else:
                pq.write_table(table, sdir / fname)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    inputs.mark_done(folder, stamp)
    return folder


def load_tables(
    folder: Path, keys: list[str], fmt: str, target: str = "valence_self"
) -> list[dict]:
    """The baseline loader: read each session's tables with pandas, resample as the store loader does."""
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    manifest = json.loads((folder / "manifest.json").read_text())
    out = []
    for s, chans in manifest.items():
        y = read(folder / s / f"labels.{fmt}")[target].to_numpy(np.float32)
        n = len(y)
        frames = {}
        blocks, oks = [], []
        for key in keys:
            m = chans[key]
            if m["file"] not in frames:
                frames[m["file"]] = read(folder / s / m["file"])
            df = frames[m["file"]]
            x, ok = resample_channel(
                df[m["columns"]].to_numpy(np.float32),
                df["time"].to_numpy(),
                df[m["valid"]].to_numpy(bool),
                n,
                LABEL_FPS,
            )
            blocks.append(x)
            oks.append(ok)
        out.append(
            {
                "session": s,
                "X": np.concatenate(blocks, axis=1),
                "valid": np.stack(oks, axis=1),
                "y": y,
            }
        )
    return out


#: codecs compared with the store's uncompressed contiguous ``data`` datasets
CODECS = {
    "lzf_shuffle": {"compression": "lzf", "shuffle": True},
    "gzip1_shuffle": {"compression": "gzip", "compression_opts": 1, "shuffle": True},
}


def compression_records(store_dir: Path, n_sessions: int = 8) -> list[dict]:
    """Read time and size of the ``data`` datasets of ``n_sessions`` shards under other codecs."""
    import tempfile

    store = Store(store_dir)
    arrays = []
    for s in store.list_sessions()[:n_sessions]:
        with h5py.File(store.shard_path(s), "r") as f:
            seen = set()
            for role in STORE_ROLES:
                for name in f.get(role, {}):
                    ds = f[role][name]["data"]
                    if ds.id not in seen:  # linked rows once, as stored
                        seen.add(ds.id)
                        arrays.append(ds[()])
    results = {}
    with tempfile.TemporaryDirectory(dir=store_dir.parent) as tmp:
        for codec, opts in {"none": {}, **CODECS}.items():
            path = Path(tmp) / f"{codec}.h5"
            with h5py.File(path, "w") as f:
                for i, a in enumerate(arrays):
                    chunks = (min(len(a), 4096), a.shape[1]) if opts and a.size else None
                    f.create_dataset(str(i), data=a, chunks=chunks, **opts)

            def read(path=path) -> None:
                with h5py.File(path, "r") as f:
                    for i in range(len(arrays)):
                        f[str(i)][()]

            read()
            results[codec] = (best_time(read, repeat=3)[0], path.stat().st_size / 1e6)
    t_none, mb_none = results.pop("none")
    out = []
    for codec, (t, mb) in results.items():
        out.append(
            record(
                f"loading.read_time_{codec}",
                t,
                "s",
                baseline="uncompressed, contiguous (the store's choice)",
                baseline_value=t_none,
            )
        )
        out.append(
            record(
                f"loading.size_{codec}",
                mb,
                "MB",
                baseline="uncompressed, contiguous (the store's choice)",
                baseline_value=mb_none,
            )
        )
    return out


def _same(store_tables, file_tables) -> None:
    by = {t["session"]: t for t in file_tables}
    if len(by) != len(store_tables):
        raise AssertionError(f"{len(by)} sessions from files, {len(store_tables)} from the store")
    for t in store_tables:
        o = by[t.session]
        if not (
            np.array_equal(t.X, o["X"], equal_nan=True)
            and np.array_equal(t.valid, o["valid"])
            and np.array_equal(t.y, o["y"])
        ):
            raise AssertionError(f"{t.session}: the tables from files differ from the store's")


def _same_tables(a, b, what: str) -> None:
    """Every field of two load_sessions results equal, arrays bit for bit."""
    if [t.session for t in a] != [t.session for t in b]:
        raise AssertionError(f"{what}: different sessions")
    for x, y in zip(a, b, strict=True):
        meta = ("listener", "story", "split", "speaker", "fps", "columns", "channels")
        if any(getattr(x, m) != getattr(y, m) for m in meta) or not all(
            getattr(x, n).dtype == getattr(y, n).dtype
            and np.array_equal(getattr(x, n).view(np.uint8), getattr(y, n).view(np.uint8))
            for n in ("X", "valid", "y", "column_channel")
        ):
            raise AssertionError(f"{what}: {x.session} differs")


def _size_mb(folder: Path) -> float:
    """MB of the files in ``folder``, leaving out hidden files and folders (stamps, the frames cache)."""
    return (
        sum(
            p.stat().st_size
            for p in folder.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
        )
        / 1e6
    )


def _size_mb_all(folder: Path) -> float:
    """MB of every file in ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def first_load_time(store: Store, keys: list[str], repeat: int) -> tuple[float, list]:
    """Best of ``repeat`` loads, each with the frames cache emptied first (resample + write)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        shutil.rmtree(store.root / FOLDER_NAME, ignore_errors=True)
        out = None
        gc.collect()
        t0 = time.perf_counter()
        out = load_sessions(store, keys)
        best = min(best, time.perf_counter() - t0)
    return best, out


def run(work: Path, quick: bool = False) -> list[dict]:
    """Time store (warm cache, first load, uncached) vs. CSV vs. Parquet loading; returns the records."""
    size = QUICK if quick else FULL
    store_dir = inputs.synth_store(work, size["n_sessions"], size["length_range"])
    store = Store(store_dir)
    keys = channel_keys(store)
    n_frames = int(store.sessions().n_frames.sum())
    load_sessions(store, keys, cache=False)  # warm the page cache of the shards
    t_uncached, fresh = best_time(lambda: load_sessions(store, keys, cache=False), repeat=2)
    t_first, first = first_load_time(store, keys, repeat=2)
    _same_tables(fresh, first, "first load vs. uncached")
    del first
    t_store, tables = best_time(lambda: load_sessions(store, keys), repeat=5)
    _same_tables(fresh, tables, "cached vs. uncached")
    del fresh
    cache_format = frames_format.records(store, keys, work, repeat=3 if quick else 7)
    cache_mb = _size_mb_all(store_dir / FOLDER_NAME)

    t0 = time.perf_counter()
    csv_dir = export_tables(store_dir, work / f"{store_dir.name}_tables", "csv")
    pq_dir = export_tables(store_dir, work / f"{store_dir.name}_tables", "parquet")
    export_s = time.perf_counter() - t0
    for p in csv_dir.rglob("*.csv"):  # warm the page cache: only parsing is timed
        p.read_bytes()
    t_csv, from_csv = best_time(lambda: load_tables(csv_dir, keys, "csv"), repeat=1)
    _same(tables, from_csv)
    del from_csv
    load_tables(pq_dir, keys, "parquet")
    t_pq, from_pq = best_time(lambda: load_tables(pq_dir, keys, "parquet"), repeat=2)
    _same(tables, from_pq)
    del from_pq, tables

    what = f"{len(store.list_sessions())} sessions, {n_frames:,} frames, {len(keys)} channels"
    print(
        f"loading: {what}; store {t_store:.2f} s (first load {t_first:.2f} s, uncached {t_uncached:.2f} s), "
        f"CSV {t_csv:.1f} s, Parquet {t_pq:.2f} s (tables written in {export_s:.0f} s)"
    )
    csv = "per-frame CSV files, pandas.read_csv + the same resampling"
    store_mb = _size_mb(store_dir)
    return [
        record("loading.store_seconds", t_store, "s", goal="< 2 s"),
        record(
            "loading.vs_csv",
            n_frames / t_store,
            "frames/s",
            baseline=csv,
            baseline_value=n_frames / t_csv,
            goal=">= 20",
        ),
        record(
            "loading.vs_parquet",
            n_frames / t_store,
            "frames/s",
            baseline="Parquet files, pandas.read_parquet + the same resampling",
            baseline_value=n_frames / t_pq,
        ),
        record("loading.first_load_seconds", t_first, "s"),
        record(
            "loading.first_load_vs_csv",
            n_frames / t_first,
            "frames/s",
            baseline=csv,
            baseline_value=n_frames / t_csv,
        ),
        record("loading.uncached_seconds", t_uncached, "s"),
        *cache_format,
        record(
            "loading.frames_cache_size",
            cache_mb,
            "MB",
            baseline="the store's shards",
            baseline_value=store_mb,
        ),
        record(
            "loading.store_size",
            store_mb,
            "MB",
            baseline="CSV files",
            baseline_value=_size_mb(csv_dir),
        ),
        record(
            "loading.store_size_vs_parquet",
            store_mb,
            "MB",
            baseline="Parquet files (snappy)",
            baseline_value=_size_mb(pq_dir),
        ),
        *compression_records(store_dir, n_sessions=2 if quick else 8),
    ]
