"""Which recording a file given to an importer belongs to (:class:`Recordings`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..sources.import_errors import DataImportError
from ..sources.manifest import SessionFiles, corpus_files, read_scan_json
from ..storage.layouts import layout_of
from ..storage.store import SessionMeta, Store, StoreError, parse_session, session_name

#: why a file an importer found was skipped: its name is no session
OMG_ONLY = "name has no Subject_<L>_Story_<S>"


@dataclass(frozen=True)
class Recordings:
    """The recordings a store knows (its shards' and its ``manifest.json``'s, by id) and how a
    file's name maps to one (:meth:`session_of`). ``listed``: they are a manifest's, so an
    OMG-Empathy name that is none of them is refused, never a new shard."""

    known: dict[str, SessionMeta]
    listed: bool

    @classmethod
    def of(cls, store: Store) -> Recordings:
        known: dict[str, SessionMeta] = {}
        listed = False
        for session in store.list_sessions():
            try:
                meta = store.meta(session)
            except StoreError:  # an unreadable shard: `verify` names it
                continue
            known[session] = meta
            listed = listed or meta.corpus_layout.listed
        scanned = store.root / "manifest.json"
        if scanned.is_file():
            for sf in read_scan_json(scanned)[0]:
                known.setdefault(sf.session, recording_meta(sf))
                listed = listed or layout_of(sf.layout).listed
        return cls(known, listed)

    def session_of(self, path: Path) -> str | None:
        """The recording ``path`` is named for: a known recording id equal to its stem, else its
        ``Subject_<L>_Story_<S>`` name (refused where the store holds a manifest's recordings
        and none such); None when it names neither."""
        if path.stem in self.known:
            return path.stem
        session = _omg_session(path)
        if session is None:
            return None
        if self.listed and session not in self.known:
            raise DataImportError(
                f"{path} is named for {session} but this store holds a manifest's recordings "
                f"({some(sorted(self.known))}) and no {session}; name the file after a recording "
                "id (e.g. <id>.csv) or pass --session ID"
            )
        return session


def recording_meta(sf: SessionFiles, n_frames: int = 0) -> SessionMeta:
    """A scanned recording's metadata, with ``n_frames`` label frames (0: unknown)."""
    return SessionMeta(
        sf.session,
        sf.listener,
        sf.story,
        sf.speaker,
        sf.split,
        n_frames,
        layout=sf.layout,
        person=sf.person,
        group=sf.group,
        partner=sf.partner,
        fold=sf.fold,
    )


def some(names: Sequence[str], n: int = 3) -> str:
    """The first ``n`` of ``names``, then how many more ("none" for none)."""
    head = ", ".join(names[:n])
    return head + (f" and {len(names) - n} more" if len(names) > n else "") if names else "none"


@dataclass
class Found:
    """What an importer found under its folder: each session's files, the files named for no
    session (``skipped``, with ``skip_reason``) and those refused (file -> why)."""

    files: dict[str, list[Path]]
    skipped: list[Path] = field(default_factory=list)
    refused: dict[Path, tuple[str, str]] = field(default_factory=dict)  # file -> (session, why)
    skip_reason: str = OMG_ONLY


def _order(session: str) -> tuple[int, int, int, str]:
    """Sort key: OMG-Empathy sessions by listener and story, then other ids by name."""
    ls = parse_session(session)
    return (0, *ls, "") if ls else (1, 0, 0, session)


def find_session_files(
    root: Path,
    exts: tuple[str, ...],
    recordings: Recordings | None = None,
    allow_outside: bool = False,
) -> Found:
    """The files of extension ``exts`` under ``root`` (any depth, hidden folders left out, none
    leaving it unless ``allow_outside``: :func:`~featurestore.sources.manifest.corpus_files`) by
    the session they are named for (:meth:`Recordings.session_of`, else their OMG name)."""
    if not root.is_dir():
        raise FileNotFoundError(
            f"folder {root} does not exist; pass the folder holding one file per recording "
            "(named by its id or Subject_<L>_Story_<S>)"
        )
    out = Found(defaultdict(list))
    if recordings is not None and recordings.known:
        out.skip_reason = "name is neither a recording id of the store nor Subject_<L>_Story_<S>"
    for p in corpus_files(root, exts, allow_outside):
        try:
            session = recordings.session_of(p) if recordings else _omg_session(p)
        except DataImportError as e:
            out.refused[p] = (_omg_session(p) or p.stem, str(e))
            continue
        if session is None:
            out.skipped.append(p)
        else:
            out.files[session].append(p)
    out.files = dict(sorted(out.files.items(), key=lambda kv: _order(kv[0])))
    return out


def _omg_session(path: Path) -> str | None:
    """The ``Subject_<L>_Story_<S>`` session ``path`` is named for, or None."""
    ls = parse_session(path.stem)
    return session_name(*ls) if ls else None


def one_file(path: Path, session: str, recordings: Recordings, exts: tuple[str, ...]) -> Found:
    """File ``path`` as recording ``session``'s (``--session``), refused as ``session_of`` does."""
    if not path.is_file() or path.suffix.lower() not in exts:
        raise FileNotFoundError(
            f"{path}: no such file; with --session ID give one file ({', '.join(exts)})"
        )
    if recordings.listed and session not in recordings.known:
        why = (
            f"{path}: --session {session} is no recording of this store (its recordings: "
            f"{some(sorted(recordings.known))}); give a recording id of the manifest"
        )
        return Found({}, refused={path: (session, why)})
    return Found({session: [path]})
