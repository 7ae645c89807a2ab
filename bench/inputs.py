"""What the benchmarks measure on, made in the run and cached under the work folder.

* synthetic feature stores (:func:`bench.synth.synth_store`) of 10 to 160 sessions;
* a 2560x720 H.264 + AAC video of the demo corpus (:func:`featurestore.demo.build_demo`):
  the astronaut face at about 180 px, as large as a face in OMG-Empathy's frames.

Each input sits in its own folder with a stamp file naming what made it (the generator's
source hash and arguments). A folder whose stamp differs, e.g. after a change of the store
layout in ``featurestore/storage/store.py``, is deleted and rebuilt, so cached inputs never measure
old code. The default work folder is ``bench/.work/`` (git-ignored).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

WORK = Path(__file__).resolve().parent / ".work"
_STAMP = ".bench_stamp.json"


def _source_hash(*modules: str) -> str:
    """Hash of the source files of ``modules`` (dotted names; a package counts with all its
    modules), so a code change invalidates a cache."""
    import importlib.util

    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"cannot find module {name} to stamp a cached benchmark input")
        origin = Path(spec.origin)
        files = sorted(origin.parent.rglob("*.py")) if spec.submodule_search_locations else [origin]
        for path in files:
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cached(folder: Path, stamp: dict) -> bool:
    """True when ``folder`` holds a complete input made with ``stamp``; else empties it."""
    path = folder / _STAMP
    if path.exists():
        try:
            if json.loads(path.read_text()) == stamp:
                return True
        except (OSError, ValueError):
            pass
    if folder.exists():
        shutil.rmtree(folder)
    return False


def mark_done(folder: Path, stamp: dict) -> None:
    """Write the stamp last: an interrupted build is never taken for a complete one."""
    (folder / _STAMP).write_text(json.dumps(stamp, sort_keys=True))


def synth_store(
    work: Path, n_sessions: int = 80, length_range: tuple[int, int] | None = None, seed: int = 0
) -> Path:
    """A synthetic store of ``n_sessions`` sessions (real lengths unless ``length_range``, frames)."""
    from bench.synth import LENGTH_RANGE
    from bench.synth import synth_store as write

    lengths = tuple(length_range or LENGTH_RANGE)
    folder = Path(work) / f"synth_{n_sessions}_{lengths[0]}-{lengths[1]}_seed{seed}"
    stamp = {
        "what": "synth_store",
        "code": _source_hash(
            "bench.synth", "featurestore.storage.store", "featurestore.storage.shard"
        ),
        "n_sessions": int(n_sessions),
        "length_range": list(lengths),
        "seed": int(seed),
    }
    if not cached(folder, stamp):
        write(folder, n_sessions=n_sessions, seed=seed, length_range=lengths, progress=False)
        mark_done(folder, stamp)
    return folder


def demo_video(work: Path, duration_s: float = 60.0, width: int = 2560, height: int = 720) -> Path:
    """One demo-corpus session (listener 1, story 1) of ``duration_s`` seconds at ``width`` x ``height``."""
    from featurestore.demo import GENERATOR_VERSION, build_demo

    folder = Path(work) / f"demo_{width}x{height}_{duration_s:g}s"
    stamp = {
        "what": "demo_video",
        "generator": GENERATOR_VERSION,
        "duration_s": float(duration_s),
        "width": int(width),
        "height": int(height),
    }
    if not cached(folder, stamp):
        build_demo(
            folder,
            n_listeners=1,
            stories=(1,),
            duration_s=duration_s,
            width=width,
            height=height,
            progress=False,
        )
        mark_done(folder, stamp)
    return folder / "Videos" / "Subject_1_Story_1.mp4"
