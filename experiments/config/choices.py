"""Checking a name against its valid choices, with the nearest valid one suggested.

The estimator factory, the personalization strategies and the post-processing refuse an
unknown name the same way (the config validator has its own messages, with file and line):

>>> check_choice("rescale mode", "trian", ("none", "train", "bias"))
Traceback (most recent call last):
...
ValueError: unknown rescale mode 'trian' (did you mean 'train'?); valid: none, train, bias
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any


def suggest(word: Any, valid: Iterable[Any]) -> str:
    """``"; did you mean 'x'?"`` for the valid name nearest ``word`` (difflib), else ``"; valid: a, b"``."""
    valid = [str(v) for v in valid]
    close = difflib.get_close_matches(str(word), valid, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(valid)}"


def check_choice(kind: str, value: str, valid: Sequence[str], context: str = "") -> None:
    """Raise ``ValueError`` naming ``kind``, ``value`` (then ``context``, e.g. `` for model 'svr'``),
    the nearest valid choice and all of them, unless ``value`` is one of ``valid``."""
    if value in valid:
        return
    close = difflib.get_close_matches(str(value), [str(v) for v in valid], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(
        f"unknown {kind} {value!r}{context}{hint}; valid: {', '.join(map(str, valid)) or '(none)'}"
    )
