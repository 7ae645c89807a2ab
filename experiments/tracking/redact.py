"""Passwords out of everything the package shows or stores (MLflow and the database driver get the URI as given)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: the mask that stands for a password
MASK = "***"

# scheme://user:password@ : the password runs to the last '@' before the host (an '@' inside a
# password should be written %40, but a raw one is masked too); no whitespace, '/' or quote in it
_USERINFO = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*:)(?P<password>[^\s/'\"]*)(?=@[^\s@/'\"]*(?:[/\s'\"]|$))"
)


def mask_uri(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: m.group("head") + MASK, text)


def mask_all(obj: Any) -> Any:
    """``obj`` (nested dicts, lists, tuples) with :func:`mask_uri` applied to every string in it."""
    if isinstance(obj, str):
        return mask_uri(obj)
    if isinstance(obj, Mapping):
        return {k: mask_all(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(mask_all(v) for v in obj)
    return obj
