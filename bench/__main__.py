"""Run the benchmarks, print a table, write ``bench/results.json``.

    python -m bench [--quick] [--only NAME ...] [--rounds N] [--out bench/results.json] [--work bench/.work]

Each benchmark measures the project's path against the alternative a researcher would
otherwise use, in the same run, and prints its records as JSON lines; the table at the end
collects them (format: :mod:`bench.harness`). Inputs (synthetic stores, a test video, CSV
and Parquet copies) are made once and cached in the work folder. ``--quick`` runs reduced
sizes (a smoke check, about a minute once the inputs are cached); its numbers are not the
goals' sizes. With ``--only``, records of the other benchmarks already in ``--out`` are kept.
``--rounds N`` sets the rounds of the benchmarks that repeat their runs (``anchor``: the
package's rounds; ``unseen``: its grid/nested pairs): fewer rounds give a spread over fewer
points, which their records say (``repeats``).
The exit status is 1 when a benchmark failed to run (not when a goal is missed).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import signal
import sys
import time
import traceback
from pathlib import Path

from .harness import FIELDS, format_table
from .inputs import WORK

#: benchmark name -> module, in the order they run (ablation, unseen, anchor and scaling last: the longest)
BENCHMARKS = {
    "egemaps": "bench.egemaps",
    "video": "bench.video",
    "face_backend": "bench.face_backend",
    "loading": "bench.loading",
    "windowing": "bench.windowing",
    "stream_windows": "bench.stream_windows",
    "trained": "bench.trained",
    "ablation": "bench.ablation",
    "unseen": "bench.unseen",
    "anchor": "bench.anchor",
    "scaling": "bench.scaling",
}
#: record name prefix of each benchmark (its name and a dot unless listed)
PREFIXES = {"face_backend": "face_geom."}
DEFAULT_OUT = Path(__file__).resolve().parent / "results.json"


def prefix(name: str) -> str:
    return PREFIXES.get(name, f"{name}.")


def run_benchmarks(
    names: list[str], quick: bool, work: Path, rounds: int | None = None
) -> tuple[list[dict], list[str]]:
    """Run the named benchmarks; returns their records and the names of those that failed.
    ``rounds``: passed to the benchmarks whose ``run`` takes it."""
    records, failed = [], []
    for name in names:
        print(f"== {name}{' (quick)' if quick else ''}", flush=True)
        t0 = time.perf_counter()
        try:
            module = importlib.import_module(BENCHMARKS[name])
            kwargs = {}
            if rounds is not None and "rounds" in inspect.signature(module.run).parameters:
                kwargs["rounds"] = rounds
            got = module.run(work, quick=quick, **kwargs)
        except Exception:  # noqa: BLE001 - report, run the others
            traceback.print_exc()
            failed.append(name)
            continue
        for r in got:
            missing = [f for f in FIELDS if f not in r]
            if missing or not r["name"].startswith(prefix(name)):
                raise RuntimeError(
                    f"benchmark {name} returned a malformed record {r.get('name')!r} (missing {missing})"
                )
            print(json.dumps(r), flush=True)
        records += got
        print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
    return records, failed


def merge(old: list[dict], new: list[dict], ran: list[str]) -> list[dict]:
    """``new`` plus the records of ``old`` that belong to benchmarks that did not run."""
    prefixes = tuple(prefix(n) for n in ran)
    return [r for r in old if not str(r.get("name", "")).startswith(prefixes)] + new


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="reduced sizes, a smoke check (not the goals' sizes)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(BENCHMARKS),
        metavar="NAME",
        help=f"run only these benchmarks ({', '.join(BENCHMARKS)})",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="rounds of the benchmarks that repeat their runs (anchor, unseen); default: theirs",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="results file (default: bench/results.json)"
    )
    parser.add_argument(
        "--work", type=Path, default=WORK, help="cache of inputs (default: bench/.work)"
    )
    args = parser.parse_args(argv)

    # a kill unwinds like Ctrl-C, so a running `experiments ablate` child is stopped too
    signal.signal(signal.SIGTERM, _interrupt)
    names = [n for n in BENCHMARKS if n in (args.only or BENCHMARKS)]
    args.work.mkdir(parents=True, exist_ok=True)
    records, failed = run_benchmarks(names, args.quick, args.work, args.rounds)
    if args.only and args.out.exists():
        try:
            records = merge(json.loads(args.out.read_text()), records, names)
        except (OSError, ValueError):
            pass
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(json.dumps(records, indent=1) + "\n")
    tmp.replace(args.out)
    print()
    print(format_table(records))
    print(
        f"\n{len(records)} results in {args.out}"
        + (f"; FAILED to run: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
