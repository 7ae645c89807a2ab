"""``python -m bench.synth --store DIR``: write a full-size synthetic store (no media) with planted
label structure (see :mod:`bench.synth`). Exit codes: 0 written, 2 usage error."""

from __future__ import annotations

import argparse
import sys

from .build import synth_store


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and write the store; the exit code."""
    p = argparse.ArgumentParser(
        prog="python -m bench.synth",
        description="write a full-size synthetic store (no media) with planted label structure",
    )
    p.add_argument("--store", default="features", help="store folder (default: features/)")
    p.add_argument(
        "--sessions", type=int, default=80, help="sessions, 8 stories per listener (default 80)"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--face-fps", type=float, default=5.0, help="face channel rate in frames/s (default 5)"
    )
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code not in (0, None) else 0
    try:
        info = synth_store(
            args.store, n_sessions=args.sessions, seed=args.seed, face_fps=args.face_fps
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"synthetic store: {info}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
