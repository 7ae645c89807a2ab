"""The packaged OMG-Empathy configs fitted to a store of another corpus: the ``--set``
overrides (:func:`corpus_overrides`) that ``experiments agreement`` applies when no ``--config``
is given, so that it runs on any store (docs/results.md, "Observer ratings and self-observer
agreement").

>>> from experiments.config.store_check import StoreNames
>>> names = StoreNames("st", {"a": 1, "b": 2}, {"a": frozenset({"listener/egemaps"}),
...     "b": frozenset({"listener/egemaps", "listener/face_geom"})},
...     {"a": frozenset({"valence"}), "b": frozenset({"valence", "arousal"})},
...     layouts={"a": "manifest", "b": "manifest"}, speakers={"a": 0, "b": 0})
>>> corpus_overrides(names)[:3]
['target=valence', 'splits=shard', 'feature_sets={person: [person/egemaps, person/face_geom]}']
"""

from __future__ import annotations

import os
from collections import Counter

import pandas as pd

from featurestore import Store
from featurestore.storage.layouts import DEFAULT_LAYOUT, CorpusLayout, common_layout, layout_of
from featurestore.storage.roles import corpus_key

from ..config.store_check import StoreNames


def corpus_overrides(names: StoreNames) -> list[str]:
    """``--set KEY=VALUE`` strings that fit a packaged (OMG-Empathy) config to the store: the target
    most sessions hold, the shards' splits, a feature set per role (in the corpus's words; ``both``
    with a partner), no fusion or importance, experiment ``agreement-<store folder>``; empty for
    the native layout."""
    if all(layout_of(name).native for name in names.layouts.values()):
        return []
    held = Counter(t for targets in names.targets.values() for t in targets)
    target = min(held, key=lambda t: (-held[t], t)) if held else "valence"
    words = names.role_names()
    keys = sorted({k for keys in names.channels.values() for k in keys})
    sets: dict[str, list[str]] = {}
    for role in ("listener", "speaker"):
        chosen = [corpus_key(k, words) for k in keys if k.startswith(f"{role}/")]
        if chosen:
            sets[words[role]] = chosen
    if len(sets) == 2:
        sets["both"] = [k for v in list(sets.values()) for k in v]
    if not sets:  # a store of labels only: the set is never complete, so never trained
        sets[words["listener"]] = [f"{words['listener']}/egemaps"]
    text = ", ".join(f"{name}: [{', '.join(v)}]" for name, v in sets.items())
    folder = os.path.basename(os.path.normpath(str(names.root))) or "store"
    return [
        f"target={target}",
        "splits=shard",
        f"feature_sets={{{text}}}",
        f"feature_set=[{', '.join(sets)}]",
        "fusion=null",
        "importance=null",
        f"tracking.experiment=agreement-{folder}",
    ]


def _sessions(store: Store | str | os.PathLike) -> pd.DataFrame | None:
    """The store's sessions table; None for no store or an empty one."""
    st = store if isinstance(store, Store) else Store(store)
    table = st.sessions() if st.root.is_dir() else None
    return None if table is None or table.empty else table


def corpus_note(store: Store | str | os.PathLike) -> tuple[CorpusLayout, str]:
    """(layout, the Markdown note a report opens with: the corpus's words for the roles, whether
    it is monadic); (the default layout, ``""``) for the OMG layout, mixed layouts or no sessions."""
    if (table := _sessions(store)) is None:
        return DEFAULT_LAYOUT, ""
    layout = common_layout(table.layout)
    return layout, layout.note(monadic=bool((table.speaker == 0).all()))


def person_ids(store: Store | str | os.PathLike) -> dict[int, str]:
    """Listener number -> the person id a manifest gives (empty for the OMG layout: numbers)."""
    if (table := _sessions(store)) is None:
        return {}
    listed = table.layout.map(lambda name: layout_of(name).listed)
    rows = table[listed & (table.person != "")]
    return {int(n): str(p) for n, p in zip(rows.listener, rows.person, strict=True)}
