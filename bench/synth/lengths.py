"""Session lengths of the synthetic corpus: the real corpus' count, range and total, drawn from a Beta law.

See "Lengths" in :mod:`bench.synth`.
"""

from __future__ import annotations

import numpy as np

#: The real OMG-Empathy corpus: sessions, total frames and per-session length range (frames).
CORPUS_SESSIONS = 80
CORPUS_TOTAL_FRAMES = 633_850
LENGTH_RANGE = (4_700, 11_925)
#: session lengths are multiples of this many frames
LENGTH_STEP = 25
STORIES_PER_LISTENER = 8
#: Beta(a, b) shape of the length distribution; b follows from the corpus mean
_LENGTH_BETA_A = 2.5


def session_plan(n_sessions: int) -> list[tuple[int, int]]:
    """``(listener, story)`` of each synthetic session: 8 stories per listener, listener-major.

    >>> session_plan(10)[-3:]
    [(1, 8), (2, 1), (2, 2)]
    """
    if int(n_sessions) < 1:
        raise ValueError(f"n_sessions must be at least 1, got {n_sessions}")
    return [
        (i // STORIES_PER_LISTENER + 1, i % STORIES_PER_LISTENER + 1)
        for i in range(int(n_sessions))
    ]


def _length_bounds(length_range: tuple[int, int]) -> tuple[int, int]:
    lo, hi = (int(v) for v in length_range)
    lo = -(-lo // LENGTH_STEP) * LENGTH_STEP
    hi = hi // LENGTH_STEP * LENGTH_STEP
    if lo < LENGTH_STEP or hi < lo:
        raise ValueError(
            f"length_range {tuple(length_range)} holds no multiple of {LENGTH_STEP} frames of at least "
            f"{LENGTH_STEP}; give (min, max) frames with min >= {LENGTH_STEP} and max >= min"
        )
    return lo, hi


def session_lengths(
    n_sessions: int,
    seed: int = 0,
    length_range: tuple[int, int] = LENGTH_RANGE,
    total: int | None = None,
) -> np.ndarray:
    """Session lengths in frames (25 fps): multiples of 25 inside ``length_range``.

    Drawn as ``lo + (hi - lo) * Beta(2.5, b)``, ``b`` chosen so that the mean over the real
    range is the corpus mean (7,923 frames). ``total`` (frames) makes them sum exactly to it
    (see the module docstring); by default that is 633,850 for 80 sessions in the real range
    and no constraint otherwise. The first ``k`` raw draws are the same for any ``n_sessions``.

    >>> lengths = session_lengths(80)
    >>> int(lengths.sum()), int(lengths.min()) >= 4700, int(lengths.max()) <= 11925
    (633850, True, True)
    """
    n = len(session_plan(n_sessions))
    lo, hi = _length_bounds(length_range)
    if total is None and n == CORPUS_SESSIONS and (lo, hi) == LENGTH_RANGE:
        total = CORPUS_TOTAL_FRAMES
    mean_frac = (CORPUS_TOTAL_FRAMES / CORPUS_SESSIONS - LENGTH_RANGE[0]) / (
        LENGTH_RANGE[1] - LENGTH_RANGE[0]
    )
    b = _LENGTH_BETA_A * (1 - mean_frac) / mean_frac
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0]))
    span = hi - lo
    excess = span * rng.beta(_LENGTH_BETA_A, b, size=n)
    if total is None:
        return (lo + LENGTH_STEP * np.round(excess / LENGTH_STEP)).astype(np.int64)
    total = int(total)
    want = total - n * lo
    if total % LENGTH_STEP or not 0 <= want <= n * span:
        raise ValueError(
            f"total {total} frames cannot be split into {n} sessions of {lo}-{hi} frames in steps of "
            f"{LENGTH_STEP}; choose a total that is a multiple of {LENGTH_STEP} between {n * lo} and {n * hi}"
        )
    # one common scale for the excess over lo; sessions that pass hi stay at hi, the rest rescale
    for _ in range(n + 1):
        at_top = excess >= span
        free = excess[~at_top].sum()
        rest = want - span * at_top.sum()
        if free <= 0:
            excess[~at_top] = rest / max((~at_top).sum(), 1)
        else:
            excess[~at_top] *= rest / free
        if not np.any(excess[~at_top] > span):
            break
        excess = np.minimum(excess, span)
    units = excess / LENGTH_STEP
    steps = np.floor(units + 1e-9).astype(np.int64)
    short = want // LENGTH_STEP - int(steps.sum())
    if short:  # largest remainder: the sessions closest to the next step get it
        order = np.argsort(-(units - steps), kind="stable")
        steps[order[:short]] += 1
    return lo + LENGTH_STEP * steps
