"""Coverage of the 95 % intervals over listeners: a session-level simulation with known truth (issue 36).

    python -m bench.coverage [--reps 10000] [--pool 20000] [--seed 0] [--table]
                             [--reaction-sd 0.5] [--drift 2.0]

**The model.** A test split is ``n`` listeners x 3 stories; the stories are fixed (the
interval is about new listeners hearing *these* stories), the listeners drawn at random. Every
series is 5 min at 5 Hz, smooth (white noise through a Gaussian kernel of 4 s, standardised):

* story ``s`` has an affect curve ``c_s(t)``, and the model's error on it ``u_s(t)`` (sd
  :data:`MODEL_ERROR`); both fixed;
* listener ``L`` has a level ``m_L ~ N(0, 0.5)`` and a reaction strength ``a_L ~ N(1, 0.5)``, in
  units of the story's response (:data:`REACTION_SD`); in the **minority** case, 15 % of the
  listeners (:data:`MINORITY`, chosen at random) react *against* the story: ``a_L -> -a_L``;
* labels ``y_Ls(t) = m_L + a_L c_s(t) + e_Ls(t)``, ``e_Ls`` the listener's own drift in the
  session (sd :data:`DRIFT`);
* predictions follow the story with the model's error: **generalized** ``c_s + u_s`` (the
  population's level, one prediction per story); **personalized** the same time course at the
  listener's own level ``m_L`` and label scale (not sign: a per-listener rescaling of the story's
  prediction, as the project's personalized choice does);
* per-session CCC (the official formula), then each listener's contribution to each protocol
  mean (:func:`experiments.evaluation.uncertainty.contributions`).

The parameters give per-listener mean CCC 0.37 (personalized) and 0.26 (generalized) with no
minority, and reproduce the t interval's coverage the issue reported (about 0.94 / 0.89). The
**estimand** is the protocol mean over a pool of ``--pool`` listeners (the population, for these
stories); each of ``--reps`` simulated test splits draws ``n`` listeners from it (with
replacement: exactly independent draws from the pool), and every method sees the same splits.
The two cases share the pool's listeners but for the flipped ones, so a minority-case split
without a minority listener is distributed exactly as a split of the normal case.

**The methods** (95 %, over listeners): ``t`` (Student t, :func:`t_bounds`), ``skew_t`` (the
package's: Hall's skewness-corrected t, :func:`skew_t_bounds`, a bound at most twice as far from
the mean as the t interval's), ``skew_t_uncapped`` (Hall's as it is), ``percentile`` and ``bca``
(bootstrap over listeners, :data:`BOOT` resamples), ``bootstrap_t`` (studentized bootstrap),
``sign_flip`` (inversion of the exact sign-flip test: Hartigan's subset means, infinite below 6
listeners, where no sign pattern is rare enough), ``anderson`` (valid for any distribution on
[-1, 1]: Anderson's bound from the DKW band; the price of assuming nothing).

**Records** (one JSON line each, :func:`bench.harness.record`): ``coverage.<case>.<protocol>.n<n>.<method>``
with ``value`` the share of splits whose interval holds the estimand, goal ``>= 0.93 coverage``
at 6 and 10 listeners, and the interval's median and 90th-percentile width; for the minority
case, ``coverage.minority.<protocol>.n<n>.without_minority`` (the share of splits without a
minority listener, ``0.85^n``, and each method's coverage on them and on the others) and
``coverage.minority.<protocol>.n<n>.level_needed`` (the nominal level the package's method needs
to reach 0.93, and its widths and normal-case coverage there: the price of the goal).
``--table`` prints the markdown table of docs/results.md after the records. Not part of
``make bench`` (a statistical measure, not a timing; about 80 s on 2 cores).
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable

import numpy as np
from scipy import stats

from experiments.evaluation.uncertainty import contributions, skew_t_bounds, t_bounds

from .harness import record

FPS = 5.0
#: session length, samples (5 min at 5 Hz), and the smoothing kernel's sd, seconds
SAMPLES = 1500
SMOOTH_S = 4.0
N_STORIES = 3
LEVEL_SD = 0.5
REACTION_SD = 0.5
DRIFT = 2.0
MODEL_ERROR = 0.5
MINORITY = 0.15
LISTENERS = (4, 6, 10)
GOAL = 0.93
BOOT = 999
CASES = {"normal": 0.0, "minority": MINORITY}
PROTOCOLS = ("personalized", "generalized")
#: the nominal levels searched for the one the package's method needs to reach the goal
LEVELS = (0.95, 0.96, 0.97, 0.98, 0.985, 0.99, 0.995, 0.999)

Bounds = tuple[np.ndarray, np.ndarray]


def smooth_series(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standardised smooth series (mean 0, sd 1 each) of :data:`SAMPLES` samples on a last axis."""
    f = np.fft.rfftfreq(SAMPLES, 1.0 / FPS)
    kernel = np.exp(-2.0 * (np.pi * f * SMOOTH_S) ** 2)  # a Gaussian of sd SMOOTH_S, in frequency
    x = np.fft.irfft(np.fft.rfft(rng.standard_normal((*shape, SAMPLES)), axis=-1) * kernel, SAMPLES)
    x -= x.mean(axis=-1, keepdims=True)
    return x / x.std(axis=-1, keepdims=True)


def _ccc(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The official CCC over the last axis (population moments)."""
    my, mp = y.mean(axis=-1), p.mean(axis=-1)
    cov = ((y - my[..., None]) * (p - mp[..., None])).mean(axis=-1)
    return 2.0 * cov / (y.var(axis=-1) + p.var(axis=-1) + (my - mp) ** 2)


def listener_pool(
    n_listeners: int,
    minority: float,
    seed: int = 0,
    reaction_sd: float = REACTION_SD,
    drift: float = DRIFT,
    chunk: int = 1000,
) -> dict[str, np.ndarray]:
    """Per-session CCC of ``n_listeners`` simulated listeners x the fixed stories (the module's model).

    Returns ``{"personalized": (listeners, stories), "generalized": (listeners, stories),
    "against": (listeners,) bool}``. The stories do not depend on ``seed``; the listeners do,
    and two calls with the same seed differ only in the ``round(minority * n_listeners)``
    listeners (chosen at random) who react against the story. ``reaction_sd``, ``drift``: the
    sd of the reaction strength and of the listener's own drift (:data:`REACTION_SD`,
    :data:`DRIFT`), in units of the story's response.
    """
    stories = np.random.default_rng(36)
    curve = smooth_series(stories, (N_STORIES,))
    shape = curve + MODEL_ERROR * smooth_series(stories, (N_STORIES,))  # the model's time course
    rng = np.random.default_rng(seed)
    # exactly round(minority * n_listeners) listeners react against the story, at random
    flips = np.random.default_rng([seed, 1]).permutation(n_listeners)
    against_all = flips < round(minority * n_listeners)
    out: dict[str, list[np.ndarray]] = {"personalized": [], "generalized": [], "against": []}
    for start in range(0, n_listeners, chunk):
        k = min(chunk, n_listeners - start)
        level = rng.normal(0.0, LEVEL_SD, k)
        strength = rng.normal(1.0, reaction_sd, k)
        against = against_all[start : start + k]
        strength = np.where(against, -strength, strength)
        labels = (
            level[:, None, None]
            + strength[:, None, None] * curve
            + drift * smooth_series(rng, (k, N_STORIES))
        )
        # the listener's label sd over the time course's
        scale = np.sqrt(strength**2 + drift**2)[:, None] / shape.std(axis=-1)
        personal = level[:, None, None] + scale[..., None] * shape
        out["personalized"].append(_ccc(labels, personal))
        out["generalized"].append(_ccc(labels, np.broadcast_to(shape, labels.shape)))
        out["against"].append(against)
    return {key: np.concatenate(parts) for key, parts in out.items()}


def percentile_bounds(x: np.ndarray, rng: np.random.Generator) -> Bounds:
    """Percentile bootstrap over listeners (the last axis), :data:`BOOT` resamples."""
    means = _resampled(x, rng).mean(axis=-1)
    return np.quantile(means, 0.025, axis=-1), np.quantile(means, 0.975, axis=-1)


def bca_bounds(x: np.ndarray, rng: np.random.Generator) -> Bounds:
    """BCa bootstrap over listeners: bias correction from the resamples, acceleration from the jackknife."""
    n = x.shape[-1]
    means = _resampled(x, rng).mean(axis=-1)
    mean = x.mean(axis=-1)
    below = (means < mean[:, None]).mean(axis=1) + 0.5 * (means == mean[:, None]).mean(axis=1)
    z0 = stats.norm.ppf(np.clip(below, 1e-6, 1 - 1e-6))
    jack = (x.sum(axis=-1, keepdims=True) - x) / (n - 1)
    d = jack.mean(axis=-1, keepdims=True) - jack
    ss = (d**2).sum(axis=-1)
    acc = np.where(ss > 0, (d**3).sum(axis=-1) / (6.0 * np.where(ss > 0, ss, 1.0) ** 1.5), 0.0)
    out = []
    for tail in (0.025, 0.975):
        z = z0 + stats.norm.ppf(tail)
        alpha = stats.norm.cdf(z0 + z / (1.0 - acc * z))
        out.append(np.array([np.quantile(m, a) for m, a in zip(means, alpha, strict=True)]))
    return out[0], out[1]


def bootstrap_t_bounds(x: np.ndarray, rng: np.random.Generator) -> Bounds:
    """Studentized bootstrap over listeners: quantiles of the resamples' t statistics (a
    resample of one repeated listener has an infinite statistic, of the sign of its shift)."""
    n = x.shape[-1]
    boot = _resampled(x, rng)
    mean, sd = x.mean(axis=-1), x.std(axis=-1, ddof=1)
    shift = boot.mean(axis=-1) - mean[:, None]
    sd_b = boot.std(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sd_b > 0, shift / (sd_b / np.sqrt(n)), np.sign(shift) * np.inf)
    # finite stand-ins for the infinite statistics (the bounds are clipped to [-1, 1] after)
    t = np.nan_to_num(t, nan=0.0, posinf=1e9, neginf=-1e9)
    q_low, q_high = np.quantile(t, 0.025, axis=-1), np.quantile(t, 0.975, axis=-1)
    return mean - q_high * sd / np.sqrt(n), mean - q_low * sd / np.sqrt(n)


def sign_flip_bounds(x: np.ndarray) -> Bounds:
    """Inversion of the exact sign-flip test of the mean (each listener's deviation from the
    candidate flipped, all 2^n patterns; equal tails): the candidates whose one-sided p-values
    both exceed 0.025. The bounds are order statistics of the 2^n - 1 subset means
    (Hartigan 1969); below 6 listeners no pattern is rare enough, and the interval is infinite."""
    n = x.shape[-1]
    subsets = np.array(list(itertools.product((0.0, 1.0), repeat=n)))[1:]
    means = np.sort(x @ (subsets / subsets.sum(axis=1, keepdims=True)).T, axis=-1)
    # accept mu while (1 + #{subset means <= mu}) / 2^n > 0.025, and the same above
    k = int(np.floor(0.025 * 2**n - 1)) + 1
    if k <= 0:
        return np.full(len(x), -np.inf), np.full(len(x), np.inf)
    return means[:, k - 1], means[:, -k]


def anderson_bounds(x: np.ndarray, low: float = -1.0, high: float = 1.0) -> Bounds:
    """Valid for any distribution on [``low``, ``high``] (Anderson 1969): the means of the
    distributions at the two edges of the DKW confidence band of the empirical CDF (95 %,
    Massart's constant): mass ``eps`` moved from the top listeners to ``low``, or from the
    bottom ones to ``high``."""
    n = x.shape[-1]
    eps = min(1.0, np.sqrt(np.log(2.0 / 0.05) / (2.0 * n)))
    xs = np.sort(x, axis=-1)
    cum = np.arange(n + 1) / n
    # mass each order statistic keeps when eps is moved away from the top (lower bound)
    keep_low = np.clip(np.minimum(cum[1:], 1.0 - eps) - np.minimum(cum[:-1], 1.0 - eps), 0, None)
    keep_high = keep_low[::-1]
    return eps * low + xs @ keep_low, eps * high + xs @ keep_high


def _resampled(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """:data:`BOOT` resamples of the listeners of each split: (splits, BOOT, n)."""
    reps, n = x.shape
    idx = rng.integers(0, n, (reps, BOOT, n))
    return np.take_along_axis(np.broadcast_to(x[:, None, :], (reps, BOOT, n)), idx, axis=2)


def methods(rng: np.random.Generator) -> dict[str, Callable[[np.ndarray], Bounds]]:
    """Every interval compared, by name; the bootstraps draw from ``rng``."""
    return {
        "t": t_bounds,
        "skew_t": skew_t_bounds,
        "skew_t_uncapped": lambda x: skew_t_bounds(x, max_stretch=np.inf),
        "percentile": lambda x: _chunked(percentile_bounds, x, rng),
        "bca": lambda x: _chunked(bca_bounds, x, rng),
        "bootstrap_t": lambda x: _chunked(bootstrap_t_bounds, x, rng),
        "sign_flip": sign_flip_bounds,
        "anderson": anderson_bounds,
    }


def _chunked(fn: Callable, x: np.ndarray, rng: np.random.Generator, size: int = 200) -> Bounds:
    """``fn`` over blocks of ``size`` splits (the resamples of all splits at once are too large)."""
    parts = [fn(x[i : i + size], rng) for i in range(0, len(x), size)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def splits(pool: dict[str, np.ndarray], n: int, reps: int, seed: int) -> dict[str, np.ndarray]:
    """``reps`` test splits of ``n`` listeners drawn from ``pool``: each protocol's listener
    contributions (reps, n), and how many minority listeners each split has (reps,)."""
    idx = np.random.default_rng(seed).integers(0, len(pool["against"]), (reps, n))
    out = {p: contributions(pool[p][idx])[p] for p in PROTOCOLS}
    out["n_against"] = pool["against"][idx].sum(axis=1)
    return out


def _width(low: np.ndarray, high: np.ndarray) -> tuple[float, float]:
    w = high - low
    return float(np.median(w)), float(np.quantile(w, 0.9))


def run(
    reps: int = 10000,
    pool_size: int = 20000,
    seed: int = 0,
    reaction_sd: float = REACTION_SD,
    drift: float = DRIFT,
) -> list[dict]:
    """Every method's coverage and width in each case, protocol and number of listeners, and the
    bound of the minority case; returns the records (see the module docstring)."""
    pools = {
        case: listener_pool(pool_size, share, seed, reaction_sd, drift)
        for case, share in CASES.items()
    }
    truth = {
        case: {p: float(contributions(pool[p])[p].mean()) for p in PROTOCOLS}
        for case, pool in pools.items()
    }
    records = []
    for n in LISTENERS:
        drawn = {case: splits(pool, n, reps, seed + n) for case, pool in pools.items()}
        for case, (k, protocol) in itertools.product(CASES, enumerate(PROTOCOLS)):
            x, mu = drawn[case][protocol], truth[case][protocol]
            # the same resamples in both cases (common random numbers)
            rng = np.random.default_rng([seed, n, k])
            covered = {}
            for name, fn in methods(rng).items():
                low, high = (np.clip(b, -1.0, 1.0) for b in fn(x))  # the range of a mean CCC
                covered[name] = (low <= mu) & (mu <= high)
                median, p90 = _width(low, high)
                records.append(
                    record(
                        f"coverage.{case}.{protocol}.n{n}.{name}",
                        float(covered[name].mean()),
                        "coverage",
                        goal=f">= {GOAL} coverage" if n >= 6 else None,
                    )
                    | {"width_median": median, "width_p90": p90, "reps": reps, "truth": mu}
                )
            if case == "minority":
                records += _bound(drawn, truth, protocol, n, covered)
    return records


def _bound(
    drawn: dict[str, dict[str, np.ndarray]],
    truth: dict[str, dict[str, float]],
    protocol: str,
    n: int,
    covered: dict[str, np.ndarray],
) -> list[dict]:
    """What the minority case allows: the splits without a minority listener, each method's
    coverage there and elsewhere, and the level the package's method needs to reach the goal."""
    none = drawn["minority"]["n_against"] == 0
    share = float(none.mean())
    # to reach the goal, the splits without a minority must be covered at least this often
    # (given how often the others are)
    needed = (GOAL - (1 - share) * float(covered["skew_t"][~none].mean())) / share
    out = [
        record(f"coverage.minority.{protocol}.n{n}.without_minority", share, "share of splits")
        | {
            "expected_share": (1 - MINORITY) ** n,
            "coverage_without": {m: float(c[none].mean()) for m, c in covered.items()},
            "coverage_with": {m: float(c[~none].mean()) for m, c in covered.items()},
            "skew_t_coverage_without_needed": needed,
        }
    ]
    x_b, mu_b = drawn["minority"][protocol], truth["minority"][protocol]
    x_a, mu_a = drawn["normal"][protocol], truth["normal"][protocol]
    base = {
        case: _width(*skew_t_bounds(d[protocol], bounds=(-1.0, 1.0)))[0]
        for case, d in drawn.items()
    }
    for level in LEVELS:
        low, high = skew_t_bounds(x_b, level, (-1.0, 1.0))
        cov_b = float(np.mean((low <= mu_b) & (mu_b <= high)))
        if cov_b >= GOAL or level == LEVELS[-1]:
            low_a, high_a = skew_t_bounds(x_a, level, (-1.0, 1.0))
            out.append(
                record(f"coverage.minority.{protocol}.n{n}.level_needed", level, "level")
                | {
                    "coverage_minority": cov_b,
                    "coverage_normal": float(np.mean((low_a <= mu_a) & (mu_a <= high_a))),
                    "width_median_minority": _width(low, high)[0],
                    "width_median_normal": _width(low_a, high_a)[0],
                    "width_median_at_95": base,
                    "reached": cov_b >= GOAL,
                }
            )
            break
    return out


def table(records: list[dict]) -> str:
    """The markdown tables of docs/results.md, one per case: coverage (median width) per method
    (rows) and number of listeners and protocol (columns)."""
    by = {r["name"]: r for r in records}
    names = list(
        dict.fromkeys(
            r["name"].rsplit(".", 1)[1]
            for r in records
            if r["unit"] == "coverage" and r["name"].startswith("coverage.normal.")
        )
    )
    head = ["method"] + [f"{n} listeners, {p[:4]}." for n in LISTENERS for p in PROTOCOLS]
    lines = []
    for case in CASES:
        lines += [f"{case}:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for m in names:
            cells = [m]
            for n, p in itertools.product(LISTENERS, PROTOCOLS):
                r = by[f"coverage.{case}.{p}.n{n}.{m}"]
                cells.append(f"{r['value']:.3f} ({r['width_median']:.2f})")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Simulate and print the records, one JSON line each (and the table with ``--table``)."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.coverage", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--reps", type=int, default=10000, help="simulated test splits per cell")
    ap.add_argument("--pool", type=int, default=20000, help="listeners in the population pool")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--reaction-sd", type=float, default=REACTION_SD, help="sd of the reaction strength"
    )
    ap.add_argument("--drift", type=float, default=DRIFT, help="sd of each listener's own drift")
    ap.add_argument(
        "--table", action="store_true", help="print the markdown table after the records"
    )
    args = ap.parse_args(argv)
    records = run(args.reps, args.pool, args.seed, args.reaction_sd, args.drift)
    for r in records:
        print(json.dumps(r), flush=True)
    if args.table:
        print(table(records))


if __name__ == "__main__":
    main()
