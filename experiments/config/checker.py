"""The value checks of the config validator, and its problems: collected, then raised at once in
the order of their lines.

>>> c = Checker("exp.yaml", {}, {"window": 2, "window.algin": 3, "window.lenghts_s": 4})
>>> c.mapping("window", {"algin": "causal", "lenghts_s": [[4]], "delay_s": [0]}, ["align", "lengths_s", "delay_s"])
{'delay_s': [0]}
>>> c.raise_errors()
Traceback (most recent call last):
...
featurestore.errors.ConfigError: 2 problems in exp.yaml:
  exp.yaml:3: window.algin: unknown key; did you mean 'align'?
  exp.yaml:4: window.lenghts_s: unknown key; did you mean 'lengths_s'?
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from featurestore.errors import ConfigError, nearest

from .choices import suggest
from .grid import format_value
from .schema import RANGE_KEYS, Range, is_number

T = TypeVar("T")


class Checker:
    """Checks of single values, and the problems found so far (:attr:`errors`)."""

    def __init__(self, source: str, origins: Mapping[str, str], lines: Mapping[str, int]) -> None:
        self.source = source
        self.origins = dict(origins)
        self.lines = dict(lines)
        self.search_method = "grid"  # set before any axis is read
        self.errors: list[ConfigError] = []
        #: sections (top-level keys) that had a problem: checks that read them are skipped
        self.failed: set[str] = set()
        #: the keys suggested for misspelt ones (``splits.val`` for ``splits.valid``): a problem
        #: of such a key (missing) follows from the misspelling and is not reported again
        self.suggested: set[str] = set()

    def fail(self, key: str, msg: str) -> ConfigError:
        """The error of ``msg`` about ``key`` (``models[0].alpha``), placed at its ``--set``
        option or at the line of the key (or of its nearest enclosing key the file has)."""
        dotted = re.sub(r"\[(\d+)\]", r".\1", key)  # models[0].alpha -> models.0.alpha, as --set
        for k, origin in self.origins.items():
            if dotted == k or dotted.startswith(k + ".") or k.startswith(dotted + "."):
                err = ConfigError(f"{origin} (on {self.source}): {key}: {msg}")
                err.line, err.key = 0, dotted  # the options come before the file's lines
                return err
        parts = dotted.split(".") if dotted else []
        prefixes = (".".join(parts[:i]) for i in range(len(parts), 0, -1))
        line = next((self.lines[p] for p in prefixes if p in self.lines), None)
        where = self.source if line is None else f"{self.source}:{line}"
        err = ConfigError(f"{where}: {key}: {msg}")
        err.line, err.key = line, dotted
        return err

    def add(self, key: str, msg: str) -> None:
        """Record a problem and go on."""
        self.errors.append(self.fail(key, msg))

    def note(self, key: str, msg: str) -> None:
        """Record a problem and go on, its section marked as failed."""
        self.add(key, msg)
        self.failed.add(re.split(r"[.\[]", key, maxsplit=1)[0])

    def attempt(self, section: str, check: Callable[[], T], default: T) -> T:
        """``check()``, or ``default`` when it raises (recorded; ``section`` marked as failed)."""
        try:
            return check()
        except ConfigError as e:
            if e.key not in self.suggested:
                self.errors.append(e)
            self.failed.add(section)
            return default

    def raise_errors(self) -> None:
        """Raise the recorded problems, in the order of their lines, in one error (``problems``)."""
        if not self.errors:
            return
        if len(self.errors) == 1:
            raise self.errors[0]
        errs = sorted(self.errors, key=lambda e: getattr(e, "line", None) or 10**9)
        err = ConfigError(
            f"{len(errs)} problems in {self.source}:\n" + "\n".join(f"  {e}" for e in errs)
        )
        err.problems = errs
        raise err

    # ---- values
    def mapping(self, key: str, value: Any, allowed: Sequence[str] | None = None) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__} {value!r}")
        if allowed is None:
            return value
        for k in value:  # every unknown key is reported; the known ones are checked on
            if k not in allowed:
                self.note(f"{key}.{k}" if key else str(k), f"unknown key{suggest(k, allowed)}")
                if (near := nearest(k, allowed)) is not None:
                    self.suggested.add(f"{key}.{near}" if key else near)
        return {k: v for k, v in value.items() if k in allowed}

    def as_list(self, key: str, value: Any) -> list:
        if isinstance(value, list | tuple):
            if not value:
                raise self.fail(key, "empty list; give at least one value")
            return list(value)
        if isinstance(value, dict):
            raise self.fail(key, f"expected a value or a list of values, got a mapping {value!r}")
        return [value]

    def integer(self, key: str, value: Any, minimum: int | None = None, none: bool = False) -> Any:
        if value is None and none:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < (minimum or -math.inf):
            floor = "" if minimum is None else f" >= {minimum}"
            raise self.fail(
                key, f"expected an integer{floor}{' or null' if none else ''}, got {value!r}"
            )
        return value

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {value!r}")
        return value

    def name(self, key: str, value: Any) -> str:
        """A name, checked where it is used (a backend registered by modules the config does not know)."""
        if not isinstance(value, str) or not value.isidentifier():
            raise self.fail(key, f"expected a name such as processes or dask, got {value!r}")
        return value

    def one(self, key: str, value: Any, valid: Iterable[str]) -> str:
        valid = list(valid)
        if isinstance(value, list):
            raise self.fail(key, f"expected one of {', '.join(valid)}, not a list {value!r}")
        return self.enum_list(key, value, valid)[0]

    def enum_list(self, key: str, value: Any, valid: Sequence[str]) -> list[str]:
        values = self.as_list(key, value)
        for v in values:
            if v not in valid:
                raise self.fail(key, f"{v!r} is not one of {', '.join(valid)}{suggest(v, valid)}")
        return list(dict.fromkeys(values))

    def number(self, key: str, v: Any, minimum: float | None = None, strict: bool = False) -> float:
        if not is_number(v):
            raise self.fail(key, f"expected a number, got {v!r}")
        if minimum is not None and (v < minimum or (strict and v == minimum)):
            raise self.fail(key, f"{v!r} must be {'>' if strict else '>='} {minimum:g}")
        return float(v)

    def number_list(
        self, key: str, value: Any, minimum: float, strict: bool = False
    ) -> list[float]:
        values = [self.number(key, v, minimum, strict) for v in self.as_list(key, value)]
        return list(dict.fromkeys(values))

    def range(
        self, key: str, value: dict, minimum: float | None = None, strict: bool = False
    ) -> Range:
        """A range mapping ``{low, high[, log][, int][, step]}`` (only in an Optuna search)."""
        if self.search_method != "optuna":
            raise self.fail(
                key,
                f"a range {value!r} is sampled by an Optuna search, but search.method is "
                f"{self.search_method!r}; add `search: {{method: optuna, n_trials: 50, track: generalized}}` "
                "or list the values of a grid, e.g. [0.01, 0.1, 1]",
            )
        for k in value:
            if k not in RANGE_KEYS:
                raise self.fail(f"{key}.{k}", f"unknown key of a range{suggest(k, RANGE_KEYS)}")
        for k in ("low", "high"):
            if k not in value:
                raise self.fail(
                    key,
                    f"a range needs low and high, e.g. {{low: 0.01, high: 10, log: true}}; {k} is missing",
                )
        low = self.number(f"{key}.low", value["low"], minimum, strict)
        high = self.number(f"{key}.high", value["high"], minimum, strict)
        if not low < high:
            raise self.fail(key, f"low {value['low']!r} must be below high {value['high']!r}")
        log = self.boolean(f"{key}.log", value.get("log", False))
        integer = self.boolean(f"{key}.int", value.get("int", False))
        step = value.get("step")
        if step is not None:
            step = self.number(f"{key}.step", step, 0.0, strict=True)
            if log:
                msg = (
                    "a range takes log or step, not both (Optuna samples a log range continuously)"
                )
                raise self.fail(key, msg)
        if log and low <= 0:
            raise self.fail(f"{key}.low", f"a log range needs low > 0, got {value['low']!r}")
        if not integer:
            return Range(low, high, log=log, step=step)
        for k, v in (("low", value["low"]), ("high", value["high"]), ("step", step)):
            if v is not None and float(v) != int(v):
                msg = f"an integer range (int: true) needs integers, got {v!r}"
                raise self.fail(f"{key}.{k}", msg)
        step = None if step is None else int(step)
        return Range(int(low), int(high), log=log, int=True, step=step)

    def number_axis(
        self, key: str, value: Any, minimum: float, strict: bool = False
    ) -> list[float] | Range:
        if isinstance(value, dict):
            return self.range(key, value, minimum, strict)
        return self.number_list(key, value, minimum, strict)

    def lengths(self, key: str, value: Any) -> list[list[float]]:
        items = self.as_list(key, value)
        if all(is_number(x) for x in items) and len(items) > 1:
            as_sets = ", ".join(f"[{format_value(x)}]" for x in items)
            raise self.fail(
                key,
                f"{items!r} is ambiguous: each entry is one multi-scale set of window lengths; "
                f"write [{as_sets}] for separate windows or [{items!r}] for one multi-scale set",
            )
        out: list[list[float]] = []
        for i, entry in enumerate(items):
            ls = sorted(self.number_list(f"{key}[{i}]", entry, 0.0, strict=True))
            if ls not in out:
                out.append(ls)
        return out
