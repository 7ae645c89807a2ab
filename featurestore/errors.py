"""The root of every error both packages show a user (a command line prints it on one line
and exits with its ``exit_code``), and the "did you mean" hint their messages give.

>>> nearest("valense", ["valence", "arousal"])
'valence'
>>> nearest("xyz", ["valence", "arousal"]) is None
True
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

#: how alike a word and a valid one must be (difflib's ratio) to be suggested
CUTOFF = 0.6


class FeaturestoreError(Exception):
    """An error a user sees: the message says what was wrong, where, and what to do."""

    #: the command line's exit code for it (1: something failed; 2: a usage error)
    exit_code = 1


class UsageError(FeaturestoreError):
    """Bad command-line input (an option, a path, a value): exit code 2."""

    exit_code = 2


class ConfigError(UsageError, ValueError):
    """A bad config: the message names the file or ``--set`` option and the key path; ``line``:
    the key's line in the file (0 for ``--set``, None: unknown), ``problems``: several at once."""

    line: int | None = None
    key: str = ""  # the dotted key path, when the error is about one key
    problems: list[ConfigError] = []  # set per instance; never appended to


def nearest(word: Any, valid: Iterable[Any]) -> str | None:
    """The valid name most like ``word`` (as text), or None when none is alike enough."""
    close = difflib.get_close_matches(str(word), [str(v) for v in valid], n=1, cutoff=CUTOFF)
    return close[0] if close else None
