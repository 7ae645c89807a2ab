"""Write pip constraints that pin every runtime dependency to its declared floor (``name==floor``).

Reads ``install_requires`` and the ``demo`` extra of ``setup.cfg`` and prints one ``name==X``
line for each ``name>=X`` requirement, so that ``pip install -c <output> -e .[dev]`` installs
the lowest versions the package declares it runs on (``make test-min``). The tools of the
``dev`` extra (pytest, type stubs, linters) are not pinned: their floors say which features the
tests use, not versions the package runs on (a stub's version names no release of its own).
Extras (``dask[distributed]``) are dropped, since pip refuses them in a constraints file.
Standard library only: it runs before any virtual environment exists.

    python tools/min_constraints.py > .venv-min/floors.txt
"""

from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

_REQ = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def floor_pins(setup_cfg: Path, extras: tuple[str, ...] = ("demo",)) -> list[str]:
    """``name==floor`` for each ``name>=floor`` in install_requires and the given extras.

    Raises ValueError naming the line when a requirement has no ``>=`` floor, since then
    the lowest version it allows is unknown.
    """
    cfg = configparser.ConfigParser()
    cfg.read(setup_cfg, encoding="utf-8")
    blocks = [cfg["options"]["install_requires"]]
    blocks += [cfg["options.extras_require"][extra] for extra in extras]
    pins: dict[str, str] = {}
    for block in blocks:
        for raw in block.splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            match = _REQ.match(line)
            if match is None:
                raise ValueError(
                    f"{setup_cfg}: requirement {line!r} has no '>=' floor; "
                    "give it one so that make test-min can install it"
                )
            name, _extra, floor = match.groups()
            pins.setdefault(name.lower(), f"{name}=={floor}")
    return list(pins.values())


def main(argv: list[str] | None = None) -> int:
    """Print the floor pins of ``setup.cfg`` (beside this script's parent) to stdout."""
    args = sys.argv[1:] if argv is None else argv
    setup_cfg = Path(args[0]) if args else Path(__file__).resolve().parent.parent / "setup.cfg"
    print("\n".join(floor_pins(setup_cfg)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
