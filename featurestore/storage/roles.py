"""The store's roles ``listener``, ``speaker`` and ``scene``, and any registered layout's words
for them, read back as the store's (:func:`store_key`) or shown in the corpus's (:func:`corpus_key`).

>>> store_key("person/face_geom"), store_key("speaker/egemaps")
('listener/face_geom', 'speaker/egemaps')
>>> corpus_key("speaker/egemaps", {"speaker": "partner"})
'partner/egemaps'
"""

from __future__ import annotations

from collections.abc import Mapping

from .layouts import layouts

#: the roles a shard stores channels under
STORE_ROLES = ("speaker", "listener", "scene")


def _words() -> dict[str, str]:
    """Any registered layout's word for a role -> the store role."""
    return {w: r for la in layouts() for r, w in la.role_names.items()}


def store_role(word: str) -> str | None:
    """The store role a word of any layout names (``person`` -> ``listener``), None if none."""
    return _words().get(word)


def role_words() -> list[str]:
    """Every word a feature-set member may start with: the store's roles, then the layouts'."""
    return [*STORE_ROLES, *(w for w in _words() if w not in STORE_ROLES)]


def store_key(key: str) -> str:
    """``role/channel`` with the role in the store's words (unknown roles are left as written)."""
    role, sep, channel = key.partition("/")
    return f"{store_role(role) or role}{sep}{channel}"


def corpus_key(key: str, names: Mapping[str, str]) -> str:
    """``role/channel`` of the store in the corpus's words ``names`` (store role -> word)."""
    role, sep, channel = key.partition("/")
    return f"{names.get(role, role)}{sep}{channel}"
