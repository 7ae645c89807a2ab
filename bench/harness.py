"""The benchmark harness: result records, goals, timing, and a description of the machine.

Every benchmark returns records of the ``bench/results.json`` format (a contract: docs/design.md#benchmarks)::

    {"name", "value", "unit", "baseline", "baseline_value", "ratio", "goal", "meets_goal", "machine"}

``ratio`` is ``value / baseline_value`` whenever both are measured. ``goal`` is the bar of the
issue as text; it applies to ``ratio`` when it has no unit (``">= 0.9"``, ``">= 20"``) and to
``value`` when it names the record's unit (``"<= 180 s"``, ``"< 4 GB"``). ``meets_goal`` is a
bool when there is a goal, else None. Throughputs are reported so that a ratio above 1 means
the project's path is faster than the baseline. A measure repeated to see through the noise
of a shared machine has ``value`` = the median and two more keys: ``repeats`` (how many runs)
and ``spread`` ([min, max] of the value over the runs).

>>> r = record("x", 2.0, "frames/s", baseline="y", baseline_value=1.0, goal=">= 1.5")
>>> r["ratio"], r["meets_goal"]
(2.0, True)
>>> record("t", 200.0, "s", goal="<= 180 s")["meets_goal"]
False
"""

from __future__ import annotations

import gc
import os
import platform
import re
import time
from collections.abc import Callable
from functools import lru_cache
from importlib import metadata

FIELDS = (
    "name",
    "value",
    "unit",
    "baseline",
    "baseline_value",
    "ratio",
    "goal",
    "meets_goal",
    "machine",
)
_GOAL_RE = re.compile(r"^\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*(.*?)\s*$")
_PACKAGES = (
    "numpy",
    "scipy",
    "pandas",
    "h5py",
    "av",
    "opensmile",
    "dlib-bin",
    "scikit-learn",
    "xgboost",
    "mlflow",
    "pyarrow",
    "psutil",
    "numba",
)


class GoalError(ValueError):
    """A goal text that cannot be read, or whose unit is not the record's."""


@lru_cache(maxsize=1)
def machine() -> dict:
    """CPU model, cores, RAM (GB), Python and key package versions, for comparing runs."""
    cpu = platform.processor() or platform.machine()
    ram = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        ram = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)
    except (ValueError, OSError, AttributeError):
        pass
    packages = {}
    for name in _PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu,
        "cores": cores,
        "ram_gb": ram,
        "python": platform.python_version(),
        "packages": packages,
    }


def loadavg() -> list[float] | None:
    """The machine's load averages over 1, 5 and 15 minutes (``/proc/loadavg``; None elsewhere)."""
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        return None


def meets(goal: str | None, value: float | None, ratio: float | None, unit: str) -> bool | None:
    """Whether ``value`` (goal with the record's unit) or ``ratio`` (goal without) meets ``goal``."""
    if goal is None:
        return None
    m = _GOAL_RE.match(goal)
    if not m:
        raise GoalError(
            f"goal {goal!r} is not of the form '<op> <number> [unit]' with op one of <=, >=, <, >"
        )
    op, threshold, goal_unit = m.group(1), float(m.group(2)), m.group(3)
    if goal_unit in ("", "x"):
        x = ratio
    elif goal_unit == unit:
        x = value
    else:
        raise GoalError(f"goal {goal!r} names unit {goal_unit!r} but the record is in {unit!r}")
    if x is None:
        return False
    return {"<=": x <= threshold, ">=": x >= threshold, "<": x < threshold, ">": x > threshold}[op]


def _round(x: float | None, digits: int = 4) -> float | None:
    if x is None:
        return None
    x = float(x)
    return float(f"{x:.{digits}g}")


def record(
    name: str,
    value: float,
    unit: str,
    *,
    baseline: str | None = None,
    baseline_value: float | None = None,
    goal: str | None = None,
    spread: tuple[float, float] | None = None,
    repeats: int | None = None,
) -> dict:
    """One result: ``value`` in ``unit`` against the ``baseline`` measured in the same run.

    Values are kept to 4 significant digits; ``ratio`` is computed from the rounded numbers
    so that ``ratio == value / baseline_value`` holds for a reader of the JSON. ``spread``
    ([min, max] over ``repeats`` runs, in ``unit``) is added only when given.
    """
    value = _round(value)
    baseline_value = _round(baseline_value)
    ratio = None
    if value is not None and baseline_value not in (None, 0.0):
        ratio = value / baseline_value
    out = {
        "name": name,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": baseline_value,
        "ratio": ratio,
        "goal": goal,
        "meets_goal": meets(goal, value, ratio, unit),
        "machine": machine(),
    }
    if spread is not None:
        out["spread"] = [_round(min(spread)), _round(max(spread))]
        out["repeats"] = repeats
    return out


def best_time(fn: Callable[[], object], repeat: int = 3) -> tuple[float, object]:
    """Smallest wall time (seconds) of ``repeat`` calls of ``fn`` and the last call's result.

    The minimum is the least disturbed by other processes on a shared machine; garbage
    collection runs before each call, not inside it.
    """
    best, out = float("inf"), None
    for _ in range(max(1, int(repeat))):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def best_times(
    fns: dict[str, Callable[[], object]], repeat: int = 3
) -> dict[str, tuple[float, object]]:
    """:func:`best_time` of several functions, their calls interleaved (a, b, a, b, ...).

    On a machine shared with other work, interleaving exposes every contender to the same
    background load, so their ratio is fairer than timing one after the other.
    """
    best = {name: (float("inf"), None) for name in fns}
    for _ in range(max(1, int(repeat))):
        for name, fn in fns.items():
            t, out = best_time(fn, repeat=1)
            if t < best[name][0]:
                best[name] = (t, out)
    return best


def format_table(records: list[dict]) -> str:
    """A fixed-width text table of records (name, value, baseline, ratio, goal, ok)."""
    rows = [("benchmark", "value", "baseline", "ratio", "goal", "ok")]
    for r in records:
        base = "" if r["baseline_value"] is None else f"{r['baseline_value']:g} ({r['baseline']})"
        ok = {True: "yes", False: "NO", None: ""}[r["meets_goal"]]
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3g}"
        value = f"{r['value']:g} {r['unit']}"
        if r.get("spread"):
            value += f" ({r['spread'][0]:g}-{r['spread'][1]:g}, {r['repeats']} runs)"
        rows.append((r["name"], value, base, ratio, r["goal"] or "", ok))
    widths = [min(max(len(row[i]) for row in rows), 60) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell[:60].ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
