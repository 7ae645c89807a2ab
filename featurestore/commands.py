"""The one command-line framework of both packages: a verb is a function, its ``--help`` line
and its options; :func:`make_parser` makes the parser of a list of verbs, :func:`run_verb` runs
one and turns the package's errors into one line."""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import FeaturestoreError
from .processes import Terminated, interrupt_exit_code

#: the exit code of a command whose reader went away (``| head -1``): 128 + SIGPIPE, as other tools
EXIT_BROKEN_PIPE = 141

#: the feature store folder both packages' verbs read when ``--store`` is not given
DEFAULT_STORE = "features"

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


def run_verb(run: Callable[[], int], prefix: str, interrupted: str) -> int:
    """``run()``'s exit code; a package error printed as ``prefix: message`` (its ``exit_code``),
    Ctrl-C or SIGTERM as ``interrupted`` with ``{what}`` filled in (130, 143), and a reader gone
    from the pipe (``| head -1``) ends the command quietly (:data:`EXIT_BROKEN_PIPE`)."""
    try:
        code = run()
        sys.stdout.flush()  # a pipe closed early breaks here, not at the interpreter's exit
        return code
    except FeaturestoreError as e:
        print(f"{prefix}: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (terminate_as_interrupt), in any phase
        what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(interrupted.format(what=what), file=sys.stderr)
        return interrupt_exit_code(e)
