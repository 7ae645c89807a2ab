"""A config's names checked against a feature store before anything is trained: a misspelt
target or channel is refused with the nearest one the store holds, a missing one with the
command that adds it."""

from __future__ import annotations

import os
import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from featurestore.errors import ConfigError, nearest
from featurestore.extractors import channels_of_kind, registry
from featurestore.storage.layouts import DEFAULT_LAYOUT, CorpusLayout, common_layout
from featurestore.storage.roles import corpus_key
from featurestore.storage.store import Store, StoreError

from .options import ConfigWarning
from .schema import ExperimentConfig, Range


@dataclass(frozen=True)
class StoreNames:
    """The names one feature store holds, per session."""

    root: str
    stories: dict[str, int]
    channels: dict[str, frozenset[str]]  # its role/channel keys
    targets: dict[str, frozenset[str]]
    #: whether every swept feature set's channels must be in every session (``experiments
    #: agreement`` takes the largest set the sessions have: there only a misspelt name is an error)
    require_channels: bool = True
    #: session -> its layout's name (:mod:`featurestore.storage.layouts`): the words of its roles
    layouts: dict[str, str] = field(default_factory=dict)
    #: session -> its partner's number (0: none, a monadic session)
    speakers: dict[str, int] = field(default_factory=dict)
    #: session -> (label frames, their rate)
    frames: dict[str, tuple[int, float]] = field(default_factory=dict)

    def role_names(self, sessions: Collection[str] | None = None) -> dict[str, str]:
        """Store role -> the corpus's word, from the layout of ``sessions`` (default all)."""
        found = (self.layouts.get(s, DEFAULT_LAYOUT.name) for s in (sessions or self.layouts))
        return common_layout(found).role_names

    def monadic(self, sessions: Collection[str]) -> bool:
        """Whether none of ``sessions`` has a partner (one person per session)."""
        return bool(self.speakers) and all(self.speakers.get(s, 1) == 0 for s in sessions)


def store_names(store: str | os.PathLike, require_channels: bool = True) -> StoreNames:
    """Read the names every shard of ``store`` holds (one open per shard); ConfigError when
    there is none (the message says how to build it)."""
    st = Store(store)
    if not st.root.is_dir():
        raise ConfigError(
            f"feature store {st.root}: no such folder; build it with `make features` (or "
            f"`featurestore extract DATA_DIR --store {st.root}`), or pass the store's folder with --store"
        )
    table = st.sessions()
    if table.empty:
        raise ConfigError(
            f"no shards in {st.root} (no Subject_<L>_Story_<S>.h5 files there); run "
            f"`make features` (or `featurestore extract DATA_DIR --store {st.root}`) first"
        )
    return StoreNames(
        root=str(store),
        stories=dict(zip(table.session, map(int, table.story), strict=True)),
        channels={s: frozenset(c) for s, c in zip(table.session, table.channels, strict=True)},
        targets={s: frozenset(t) for s, t in zip(table.session, table.targets, strict=True)},
        require_channels=require_channels,
        layouts=dict(zip(table.session, table.layout, strict=True)),
        speakers=dict(zip(table.session, map(int, table.speaker), strict=True)),
        frames={s: (int(n), float(f)) for s, n, f in table[["session", "n_frames", "fps"]].values},
    )


def corpus_layout(store: Store | str | os.PathLike) -> CorpusLayout:
    """The corpus layout of ``store``'s first shard (the default for an empty store)."""
    st = store if isinstance(store, Store) else Store(store)
    sessions = st.list_sessions() if st.root.is_dir() else []
    return st.meta(sessions[0]).corpus_layout if sessions else DEFAULT_LAYOUT


def _some(names: Sequence[str], n: int = 3) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def store_problems(
    cfg: ExperimentConfig, names: StoreNames, skip: Collection[str] = ()
) -> list[tuple[str, str]]:
    """(key path, message) for each name of ``cfg`` the sessions of its splits lack; ``skip``:
    top-level keys whose checks to leave out."""
    stories = {s for v in cfg.splits.values() for s in v}
    sessions = [s for s, story in names.stories.items() if story in stories] or list(names.stories)
    out: list[tuple[str, str]] = []
    if "splits" not in skip:
        out += _split_problems(cfg, names)
    if "target" not in skip:
        problems = (_target_problem(t, sessions, names) for t in cfg.all_targets())
        out += [("target", problem) for problem in problems if problem]
    if "window" not in skip:
        out += _window_problems(cfg, sessions, names)
    if "feature_sets" not in skip and "feature_set" not in skip:
        for fs in cfg.feature_set:
            if problem := _feature_set_problem(fs, cfg.feature_sets.get(fs, []), sessions, names):
                out.append((f"feature_sets.{fs}", problem))
    return out


def _split_problems(cfg: ExperimentConfig, names: StoreNames) -> list[tuple[str, str]]:
    """(``splits.<name>``, message) for each split none of whose stories the store has; a split
    only some of whose stories it lacks is a :class:`~.options.ConfigWarning`."""
    have = sorted(set(names.stories.values()))
    out = []
    for split, stories in cfg.splits.items():
        missing = [s for s in stories if s not in have]
        listed = f"stor{'ies' if len(missing) > 1 else 'y'} {', '.join(map(str, missing))}"
        if missing and len(missing) == len(stories):
            msg = (
                f"no session of {names.root} has {listed} (its stories: "
                f"{', '.join(map(str, have))}); list stories the store holds, or extract "
                "those sessions first"
            )
            out.append((f"splits.{split}", msg))
        elif missing:
            warnings.warn(
                f"{cfg.source}: splits.{split}: no session of {names.root} has {listed}; "
                "the split is its other stories",
                ConfigWarning,
                stacklevel=2,
            )
    return out


def _window_problems(
    cfg: ExperimentConfig, sessions: list[str], names: StoreNames
) -> list[tuple[str, str]]:
    """(``window.delay_s``, message) for each delay whose longest window reads no frame of some
    session of the splits: every row of those sessions would be missing (a Range: its high end)."""
    w = cfg.window
    delays = [w.delay_s.high] if isinstance(w.delay_s, Range) else w.delay_s
    longest = max(
        [w.lengths_s.high] if isinstance(w.lengths_s, Range) else [max(s) for s in w.lengths_s]
    )
    out = []
    for delay in delays:
        for align in w.align:
            empty = []
            for s in sessions:
                n, fps = names.frames.get(s, (0, 0.0))
                # the last frame's window ends d frames back, plus half a centred window
                half = max(1, round(longest * fps)) // 2 if align == "centred" else 0
                if n and n - 1 - round(delay * fps) + half < 0:
                    empty.append(s)
            if empty:
                seconds = min(names.frames[s][0] / names.frames[s][1] for s in empty)
                msg = (
                    f"a delay of {delay:g} s ({align} windows of at most {longest:g} s) reads "
                    f"nothing inside {len(empty)} of the {len(sessions)} sessions of the splits "
                    f"in {names.root} ({_some(empty)}; the shortest lasts {seconds:.2f} s), so "
                    "they would have no row; take a delay shorter than the sessions"
                )
                out.append(("window.delay_s", msg))
    return out


def _target_problem(target: str, sessions: list[str], names: StoreNames) -> str:
    # some sessions without it are a blind test's: a sweep leaves them out (parent_run)
    if any(target in names.targets[s] for s in sessions):
        return ""
    add = f"`featurestore labels ANNOTATION_DIR --target {target} --store {names.root}`"
    have = sorted({t for s in sessions for t in names.targets[s]})
    if _is_session_rating(target, sessions, names):
        return (
            f"{target!r} is a whole-session rating in {names.root} (one value per session, "
            "/session_labels), not a frame-level label target: model it with `experiments "
            "sessions CONFIG` (docs/config.md, whole-session ratings)"
        )
    near = nearest(target, have)
    hint = f"did you mean {near!r}?" if near else f"to add a rating as this target: {add}"
    return (
        f"{target!r} is not a label target of the store {names.root} "
        f"(it has: {', '.join(have) or 'none'}); {hint}"
    )


def _is_session_rating(target: str, sessions: list[str], names: StoreNames) -> bool:
    """Whether some session's shard has ``target`` as a whole-session rating (read only on the
    error path: the first few sessions)."""
    st = Store(names.root)
    try:
        return any(target in st.session_label_targets(s) for s in sessions[:5])
    except (StoreError, OSError, KeyError, ValueError):  # unreadable: the usual message follows
        return False


def _feature_set_problem(fs: str, keys: list[str], sessions: list[str], names: StoreNames) -> str:
    words = names.role_names(sessions)
    have = sorted({k for s in sessions for k in names.channels[s]})
    problems = []
    for key in keys:
        lacking = [s for s in sessions if key not in names.channels[s]]
        if not lacking:
            continue
        role, channel = key.split("/", 1)
        if role == "speaker" and names.monadic(sessions):  # whatever the verb
            person = words["listener"]
            problems.append(
                f"{corpus_key(key, words)!r}: {names.root} is a monadic corpus (no session has a "
                f"{words['speaker']}), so a feature set can name only {person}/... and scene/... "
                f"channels; take {corpus_key(key, words)!r} out of {fs!r}, or leave {fs!r} out of "
                f"feature_set (e.g. --set feature_set=[...] with sets of the {person} only)"
            )
            continue
        # a misspelt channel: close to a channel of the store or of featurestore's, but neither
        stored = {k.split("/", 1)[1] for k in have if k.startswith(f"{role}/")}
        near = None
        if channel not in stored and channel not in registry():
            near = nearest(channel, stored | set(registry()))
        if near:  # an error whatever the verb
            problems.append(
                f"{corpus_key(key, words)!r} is in no session of {names.root}; did you mean "
                f"'{words.get(role, role)}/{near}'?"
            )
            continue
        if not names.require_channels:
            continue
        add = (
            f"`featurestore transcripts TRANSCRIPT_DIR --store {names.root}`"
            if channel in channels_of_kind("transcript")
            else f"`featurestore extract DATA_DIR --store {names.root}` (with {channel} in its channels)"
        )
        where = (
            f"no session of {names.root} has it (the store has: "
            f"{', '.join(corpus_key(k, words) for k in have)})"
            if len(lacking) == len(sessions)
            else f"{len(lacking)} of the {len(sessions)} sessions of the splits lack it ({_some(lacking)})"
        )
        problems.append(
            f"{corpus_key(key, words)!r}: {where}; add it with {add}, or leave {fs!r} out of feature_set"
        )
    return "; ".join(problems)
