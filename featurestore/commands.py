"""The one command-line framework of both packages: a verb is a function, its ``--help`` line
and its options; :func:`make_parser` makes the parser of a list of verbs."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: an option of a verb: argparse's ``add_argument(*flags, **kwargs)``
Option = tuple[tuple[str, ...], dict[str, Any]]


def opt(*flags: str, **kwargs: Any) -> Option:
    """An option of a verb: argparse's ``add_argument(*flags, **kwargs)``."""
    return flags, kwargs


@dataclass(frozen=True)
class Verb:
    """One verb: ``run`` (``cmd_<verb>``, named after it), its one-line ``help``, its ``options``,
    its ``--help`` description (default: ``run``'s docstring) and ``defaults`` set on the parsed
    arguments."""

    run: Callable[[argparse.Namespace], int]
    help: str
    options: Sequence[Option] = ()
    description: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.run.__name__.removeprefix("cmd_")

    def add(self, sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
        p = sub.add_parser(
            self.name, help=self.help, description=self.description or inspect.getdoc(self.run)
        )
        for flags, kwargs in self.options:
            p.add_argument(*flags, **kwargs)
        p.set_defaults(func=self.run, **self.defaults)
        return p


def make_parser(
    prog: str, description: str, version: str, verbs: Sequence[Verb]
) -> argparse.ArgumentParser:
    """``prog``'s parser: ``--version`` and one sub-parser per verb (one is required)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--version", action="version", version=f"{prog} {version}")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb in verbs:
        verb.add(sub)
    return p
