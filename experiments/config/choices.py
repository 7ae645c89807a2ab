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
from collections.abc import Sequence


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
