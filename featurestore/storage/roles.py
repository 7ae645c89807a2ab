"""The corpus's words for the store's roles ``listener`` (the rated person), ``speaker`` (the
partner) and ``scene``: each layout's (:data:`ROLE_NAMES`), which configs may use
(:func:`store_key`) and reports show (:func:`corpus_key`); docs/store.md, layout.

>>> store_key("person/face_geom"), store_key("speaker/egemaps")
('listener/face_geom', 'speaker/egemaps')
>>> corpus_key("speaker/egemaps", role_names("manifest"))
'partner/egemaps'
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping

#: the roles a shard stores channels under
STORE_ROLES = ("speaker", "listener", "scene")
#: layout -> store role -> the layout's word for it
ROLE_NAMES: dict[str, dict[str, str]] = {
    "omg": {"listener": "listener", "speaker": "speaker", "scene": "scene"},
    "manifest": {"listener": "person", "speaker": "partner", "scene": "scene"},
}
#: layout -> its word for a session's group (the OMG layout's story)
GROUP_NAMES = {"omg": "story", "manifest": "group"}
#: every word a config may use for a role -> the store role
_WORDS = {w: r for names in ROLE_NAMES.values() for r, w in names.items()}


def role_names(layout: str) -> dict[str, str]:
    """Store role -> the ``layout``'s word (an unknown layout keeps the store's words)."""
    return dict(ROLE_NAMES.get(layout, ROLE_NAMES["omg"]))


def role_names_json(layout: str) -> str:
    """:func:`role_names` as the JSON of the shard attribute ``role_names``."""
    return json.dumps(role_names(layout), sort_keys=True)


def store_role(word: str) -> str | None:
    """The store role a word of any layout names (``person`` -> ``listener``), None if none."""
    return _WORDS.get(word)


def role_words() -> list[str]:
    """Every word a feature-set member may start with: the store's roles, then the layouts'."""
    return [*STORE_ROLES, *(w for w in _WORDS if w not in STORE_ROLES)]


def store_key(key: str) -> str:
    """``role/channel`` with the role in the store's words (unknown roles are left as written)."""
    role, sep, channel = key.partition("/")
    return f"{store_role(role) or role}{sep}{channel}"


def corpus_key(key: str, names: Mapping[str, str]) -> str:
    """``role/channel`` of the store in the corpus's words ``names`` (store role -> word)."""
    role, sep, channel = key.partition("/")
    return f"{names.get(role, role)}{sep}{channel}"


def roles_note(layout: str, monadic: bool = False) -> str:
    """A report's Markdown note of the corpus's words for the roles (empty for the OMG layout);
    ``monadic``: no session has a partner.

    >>> roles_note("omg")
    ''
    >>> roles_note("manifest").startswith("Corpus layout `manifest`: the rated person is the `person`")
    True
    >>> "no partner" in roles_note("manifest", monadic=True)
    True
    """
    names = role_names(layout)
    if names == ROLE_NAMES["omg"]:
        return ""
    other = (
        f"one person per session (no {names['speaker']})"
        if monadic
        else f"the other person the `{names['speaker']}` (stored as `speaker`)"
    )
    return (
        f"Corpus layout `{layout}`: the rated person is the `{names['listener']}` (stored as "
        f"`listener`), {other}; per-session ids are the manifest's.\n\n"
    )


#: the OMG words of a report's prose -> the store role or group they name
_PROSE = {"listener": "listener", "speaker": "speaker", "story": "group"}
_PROSE_WORD = re.compile(r"\b(listener|speaker|story|stories)(s?)\b", re.IGNORECASE)


def in_corpus_words(text: str, layout: str, keep: Collection[str] = ()) -> str:
    """A report's prose with the OMG words (listener, speaker, story) in ``layout``'s (whole
    words only, and none of ``keep``, e.g. feature-set names).

    >>> in_corpus_words("mean per listener, then per story; Listeners left out", "manifest")
    'mean per person, then per group; Persons left out'
    >>> in_corpus_words("per story", "omg")
    'per story'
    >>> in_corpus_words("ridge speaker w2s, per speaker", "manifest", keep={"speaker"})
    'ridge speaker w2s, per speaker'
    >>> in_corpus_words("models that do not know who is listening", "manifest")
    'models that do not know who the person is'
    """
    if layout not in ROLE_NAMES or layout == "omg":
        return text
    names = {**role_names(layout), "group": GROUP_NAMES[layout]}
    text = text.replace("who is listening", f"who the {names['listener']} is")

    def repl(m: re.Match) -> str:
        if m.group(0) in keep:
            return m.group(0)
        word = m.group(1).lower()
        plural = bool(m.group(2)) or word == "stories"
        new = names[_PROSE["story" if word == "stories" else word]] + ("s" if plural else "")
        return new.capitalize() if m.group(1)[0].isupper() else new

    return _PROSE_WORD.sub(repl, text)
