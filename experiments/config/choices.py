"""Checking a name against its valid choices (the nearest suggested), and the registries of
named specs (models, metrics).

>>> check_choice("rescale mode", "trian", ("none", "train", "bias"))
Traceback (most recent call last):
...
ValueError: unknown rescale mode 'trian' (did you mean 'train'?); valid: none, train, bias
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from featurestore.errors import nearest


def suggest(word: Any, valid: Iterable[Any]) -> str:
    """``"; did you mean 'x'?"`` for the valid name nearest ``word`` (difflib), else ``"; valid: a, b"``."""
    valid = [str(v) for v in valid]
    close = nearest(word, valid)
    return f"; did you mean {close!r}?" if close else f"; valid: {', '.join(valid)}"


def check_choice(kind: str, value: str, valid: Sequence[str], context: str = "") -> None:
    """Raise ``ValueError`` naming ``kind``, ``value``, ``context``, the nearest valid choice and
    all of them, unless ``value`` is one of ``valid``."""
    if value in valid:
        return
    close = nearest(value, valid)
    hint = f" (did you mean {close!r}?)" if close else ""
    raise ValueError(
        f"unknown {kind} {value!r}{context}{hint}; valid: {', '.join(map(str, valid)) or '(none)'}"
    )


class Named(Protocol):
    """A spec registered by its ``name``."""

    @property
    def name(self) -> str: ...


S = TypeVar("S", bound=Named)


class Registry(Generic[S]):
    """The specs of one ``kind`` by name, in the order they were registered."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._specs: dict[str, S] = {}

    def register(self, spec: S) -> S:
        """Make ``spec`` available by its name (replacing one of that name)."""
        self._specs[spec.name] = spec
        return spec

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a test's own spec, once it has used it)."""
        self._specs.pop(name, None)

    def get(self, name: str) -> S:
        """The spec registered as ``name`` (ValueError with the nearest name if none)."""
        check_choice(self.kind, name, sorted(self._specs))
        return self._specs[name]

    def all(self) -> dict[str, S]:
        """Name -> spec, in order."""
        return dict(self._specs)
