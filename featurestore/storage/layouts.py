"""A corpus layout is one object: how a corpus names its sessions' people, in which words its
tables and reports speak, and what it checks; a shard records its name (root attribute
``layout``) and :func:`layout_of` resolves it. Built in: :data:`OMG` and :data:`MANIFEST`; a
third is one registered :class:`CorpusLayout` (docs/development.md, adding a corpus layout).

>>> layout_of("manifest").role_names["listener"], layout_of("omg").words.group
('person', 'story')
>>> layout_of("a layout of the future") is DEFAULT_LAYOUT  # read with the store's own words
True
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol


@dataclass(frozen=True)
class CorpusWords:
    """A corpus's own words for the store's roles (``listener``: the rated person, ``speaker``:
    the partner, ``scene``) and for a session's group (the OMG layout's story)."""

    listener: str
    speaker: str
    group: str
    scene: str = "scene"

    def roles(self) -> dict[str, str]:
        return {"listener": self.listener, "speaker": self.speaker, "scene": self.scene}


class SessionIds(Protocol):
    """What :meth:`CorpusLayout.people` reads of a session (a shard's ``SessionMeta``)."""

    listener: int
    story: int
    speaker: int
    person: str
    group: str
    partner: str


class Declared(Protocol):
    """What :meth:`CorpusLayout.check_declarations` reads of a scanned ``SessionFiles``."""

    scales: dict[str, list[float]]
    min_coverage: float | None


#: the OMG words of a report's prose -> the store role or group they name
_PROSE = {"listener": "listener", "speaker": "speaker", "story": "group"}
_PROSE_WORD = re.compile(r"\b(listener|speaker|story|stories)(s?)\b", re.IGNORECASE)


class CorpusLayout:
    """A corpus layout (subclass it; the class attributes say what the layout is)."""

    #: the name a shard's root attribute ``layout`` records
    name: ClassVar[str]
    #: the corpus's words for its roles and groups
    words: ClassVar[CorpusWords]
    #: the corpus the packaged configs and the OMG-Empathy paper's numbers are for: its reports
    #: compare with them and keep the store's words
    native: ClassVar[bool] = False
    #: its sessions are the recordings a list names (ids as written: person, group, partner;
    #: the integers only number them): a file named ``Subject_<L>_Story_<S>`` that is none of
    #: them is refused, never a new shard
    listed: ClassVar[bool] = True
    #: a config's declarations (scales, min_coverage) must agree with the session's own; False:
    #: they replace the layout's own
    declarations_agree: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"<corpus layout {self.name}>"

    @property
    def role_names(self) -> dict[str, str]:
        """Store role -> the layout's word (a shard's ``role_names`` attribute)."""
        return self.words.roles()

    def role_names_json(self) -> str:
        """:attr:`role_names` as the JSON of the shard attribute ``role_names``."""
        return json.dumps(self.role_names, sort_keys=True)

    def ids(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A session's ids (``person``, ``group``, ``partner``; ``-`` for none) from a row of a
        session table (:meth:`~featurestore.storage.store.Store.sessions`, a scan's sessions)."""
        return {
            "person": row["person"],
            "group": row["group"],
            "partner": row.get("partner") or "-",
        }

    def id_columns(self, partners: bool) -> dict[str, str]:
        """A session table's id columns, header -> key of a row with :meth:`ids` merged in
        (``partners``: some session has a partner)."""
        w = self.words
        return {
            w.listener: "person",
            w.group: "group",
            **({w.speaker: "partner"} if partners else {}),
        }

    def people(self, meta: SessionIds) -> str:
        """The session's people and group, as its layout names them (``featurestore inspect``)."""
        w = self.words
        partner = f", {w.speaker} {meta.partner}" if meta.partner else f", no {w.speaker}"
        return f"{w.listener} {meta.person}, {w.group} {meta.group}{partner}"

    def note(self, monadic: bool = False) -> str:
        """A report's Markdown note of the corpus's words for the roles (``monadic``: no
        session has a partner)."""
        w = self.words
        other = (
            f"one person per session (no {w.speaker})"
            if monadic
            else f"the other person the `{w.speaker}` (stored as `speaker`)"
        )
        return (
            f"Corpus layout `{self.name}`: the rated person is the `{w.listener}` (stored as "
            f"`listener`), {other}; per-session ids are the manifest's.\n\n"
        )

    def in_words(self, text: str, keep: Collection[str] = ()) -> str:
        """A report's prose with the OMG words (listener, speaker, story) in this layout's
        (whole words only, and none of ``keep``, e.g. feature-set names).

        >>> MANIFEST.in_words("mean per listener, then per story; Listeners left out")
        'mean per person, then per group; Persons left out'
        >>> MANIFEST.in_words("ridge speaker w2s, per speaker", keep={"speaker"})
        'ridge speaker w2s, per speaker'
        >>> MANIFEST.in_words("models that do not know who is listening")
        'models that do not know who the person is'
        """
        names = {**self.role_names, "group": self.words.group}
        text = text.replace("who is listening", f"who the {names['listener']} is")

        def repl(m: re.Match) -> str:
            if m.group(0) in keep:
                return m.group(0)
            word = m.group(1).lower()
            plural = bool(m.group(2)) or word == "stories"
            new = names[_PROSE["story" if word == "stories" else word]] + ("s" if plural else "")
            return new.capitalize() if m.group(1)[0].isupper() else new

        return _PROSE_WORD.sub(repl, text)

    def check_declarations(
        self,
        session: Declared,
        scales: Mapping[str, list[float]],
        min_coverage: float | None,
        where: str,
    ) -> None:
        """ValueError for a config's declaration (``scales``: target -> [low, high],
        ``min_coverage``, from ``where``) that contradicts the session's own (a manifest's),
        unless :attr:`declarations_agree` is False."""
        if not self.declarations_agree:
            return
        for t, scale in scales.items():
            if session.scales.get(t, scale) != scale:
                raise ValueError(
                    f"{where}: targets.{t}.scale {scale} contradicts the manifest's "
                    f"{session.scales[t]}; declare it in one place"
                )
        if (
            None not in (min_coverage, session.min_coverage)
            and min_coverage != session.min_coverage
        ):
            raise ValueError(
                f"{where}: min_coverage {min_coverage} contradicts the manifest's "
                f"{session.min_coverage}; declare it in one place"
            )


class OmgLayout(CorpusLayout):
    """OMG-Empathy's: listener and speaker, found by ``Subject_<L>_Story_<S>`` names; its ids
    are the numbers and its words are the store's own."""

    name = "omg"
    words = CorpusWords(listener="listener", speaker="speaker", group="story")
    native = True
    listed = False
    declarations_agree = False  # the config's declarations replace the layout's own

    def ids(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The numbers (listener, story, speaker), as a listed layout's table shows them."""
        return {"person": row["listener"], "group": row["story"], "partner": row["speaker"] or "-"}

    def id_columns(self, partners: bool) -> dict[str, str]:
        """listener, story and speaker, always (the speaker's number as stored)."""
        return {"listener": "listener", "story": "story", "speaker": "speaker"}

    def people(self, meta: SessionIds) -> str:
        return f"listener {meta.listener}, story {meta.story}, speaker {meta.speaker}"

    def note(self, monadic: bool = False) -> str:
        return ""  # the reports' words are the OMG layout's

    def in_words(self, text: str, keep: Collection[str] = ()) -> str:
        return text


class ManifestLayout(CorpusLayout):
    """A manifest's rows (any corpus): a rated ``person``, maybe a ``partner``, in a ``group``,
    ids kept as written (docs/corpus.md)."""

    name = "manifest"
    words = CorpusWords(listener="person", speaker="partner", group="group")


_LAYOUTS: dict[str, CorpusLayout] = {}


def register_layout(layout: CorpusLayout) -> CorpusLayout:
    """Make ``layout`` known by its ``name`` (what shards of it record); returns it."""
    _LAYOUTS[layout.name] = layout
    return layout


OMG = register_layout(OmgLayout())
MANIFEST = register_layout(ManifestLayout())
#: the layout of a shard that records none, or one this version does not know: the store's words
DEFAULT_LAYOUT: CorpusLayout = OMG


def layout_of(name: str) -> CorpusLayout:
    """The layout registered as ``name``; :data:`DEFAULT_LAYOUT` for a name none is (a shard
    of a later version keeps the store's words)."""
    return _LAYOUTS.get(name, DEFAULT_LAYOUT)


def layouts() -> list[CorpusLayout]:
    """Every registered layout, in registration order."""
    return list(_LAYOUTS.values())


def common_layout(names: Iterable[str]) -> CorpusLayout:
    """The one layout of ``names`` (sessions' layouts); :data:`DEFAULT_LAYOUT`, the store's
    own words, when they mix layouts or there are none."""
    found = {layout_of(n).name for n in names}
    return layout_of(found.pop()) if len(found) == 1 else DEFAULT_LAYOUT


def table_layout(names: Iterable[str]) -> CorpusLayout:
    """The layout a table of sessions of ``names`` is shown in: theirs when they share one,
    else the first listed one of them (its columns hold the others' numbers as ids)."""
    found = [layout_of(n) for n in dict.fromkeys(names)]
    if len({la.name for la in found}) <= 1:
        return found[0] if found else DEFAULT_LAYOUT
    return next((la for la in found if la.listed), DEFAULT_LAYOUT)
