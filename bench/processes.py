"""Run a command and measure its wall time and the peak memory of its whole process tree.

Memory is sampled every ``interval_s`` seconds with psutil, summed over the process and all
its descendants (forked sweep workers included):

* ``peak_pss_gb``: proportional set size, each shared page divided among the processes that
  map it. Forked workers share the parent's arrays copy-on-write, so this is the physical
  memory the tree holds: the measure the memory goal is checked against.
* ``peak_rss_gb``: resident set size summed over processes. Pages shared by fork are counted
  once per process, so this over-counts; it is reported as an upper bound.
* ``peak_worker_uss_gb``: the largest unique set size of any one child (memory that child
  alone holds: what it computes, and anything it copied).
* ``peak_worker_shared_gb``: the largest ``RSS - USS`` of any one child: pages it maps that
  other processes map too. A forked sweep worker that reads the parent's feature matrix in
  place shows at least the matrix here; one that copied it would show it in its USS instead.
* ``peak_parent_pss_gb`` and ``peak_children_pss_gb``: the breakdown of ``peak_pss_gb``, the
  largest PSS of the command's own process, and the largest PSS summed over its descendants
  (each the peak of its own samples, so they may come from different moments).
* ``peak_pss_at_s`` and ``peak_pss_parent_gb``: when ``peak_pss_gb`` was sampled (seconds
  from the start) and the command's own share of it then, which say what the tree was doing
  at its peak (the phase of a run, the workers' part at that moment).
* ``max_rss_gb``: the largest peak RSS (``VmHWM`` of ``/proc/<pid>/status``, exact even for
  a peak between two samples) of any one process of the tree.

``cpu_s`` is the CPU time (user + system, seconds) of the whole tree, from the kernel: on a
machine shared with other work it says what the command itself cost, where wall time also
counts the waiting for the CPU.

Without psutil only the times and ``max_rss_gb`` (then from ``getrusage(RUSAGE_CHILDREN)``:
the largest RSS of any descendant of this process so far) are measured; the others are None.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunStats:
    """Wall and CPU time (s) and peak memory (GB) of one command; see the module docstring."""

    returncode: int
    wall_s: float
    peak_pss_gb: float | None
    peak_rss_gb: float | None
    peak_worker_uss_gb: float | None
    peak_worker_shared_gb: float | None
    max_rss_gb: float
    cpu_s: float
    samples: int
    peak_parent_pss_gb: float | None = None
    peak_children_pss_gb: float | None = None
    peak_pss_at_s: float | None = None
    peak_pss_parent_gb: float | None = None


def _peak_rss(pid: int) -> int:
    """``VmHWM`` (peak RSS, bytes) of a process, 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tree_memory(proc) -> tuple[int, int, int, int, int, int, int]:
    """(sum of PSS, sum of RSS, largest child USS, largest child RSS - USS, largest peak RSS,
    PSS of ``proc``, sum of the descendants' PSS), bytes, over ``proc`` and its descendants."""
    import psutil

    pss = rss = worker_uss = worker_shared = hwm = parent_pss = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0, 0, 0, 0, 0, 0, 0
    for p in procs:
        try:
            mi = p.memory_full_info()
        except psutil.Error:  # gone meanwhile
            continue
        pss += getattr(mi, "pss", mi.rss)
        rss += mi.rss
        hwm = max(hwm, _peak_rss(p.pid), mi.rss)
        if p is not proc:
            worker_uss = max(worker_uss, mi.uss)
            worker_shared = max(worker_shared, mi.rss - mi.uss)
        else:
            parent_pss = getattr(mi, "pss", mi.rss)
    return pss, rss, worker_uss, worker_shared, hwm, parent_pss, pss - parent_pss


def run_measured(
    cmd: list[str],
    log: Path,
    interval_s: float = 0.25,
    env: dict | None = None,
    timeout_s: float = 7200,
) -> RunStats:
    """Run ``cmd`` (stdout and stderr to ``log``), sampling its process tree's memory."""
    try:
        import psutil
    except ImportError:
        psutil = None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = usage.ru_utime + usage.ru_stime
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        child = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        peaks = [0] * 7
        samples = 0
        at_s, parent_at_peak = 0.0, 0
        proc = psutil.Process(child.pid) if psutil is not None else None
        try:
            while child.poll() is None:
                if proc is not None:
                    now = _tree_memory(proc)
                    if now[0] > peaks[0]:  # the largest total so far: when, and the parent's share
                        at_s, parent_at_peak = time.perf_counter() - t0, now[5]
                    peaks = [max(a, b) for a, b in zip(peaks, now, strict=True)]
                    samples += 1
                if time.perf_counter() - t0 > timeout_s:
                    child.kill()
                    raise TimeoutError(
                        f"{' '.join(cmd[:4])} ... ran longer than {timeout_s:.0f} s; see {log}"
                    )
                time.sleep(interval_s)
        except BaseException:
            if child.poll() is None:
                child.terminate()
                child.wait(30)
            raise
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = proc is not None and samples > 0
    # without psutil: the largest RSS any descendant of this process ever reached (KiB on Linux)
    max_rss = peaks[4] / 1e9 if got else usage.ru_maxrss * 1024 / 1e9
    return RunStats(
        returncode=child.returncode,
        wall_s=wall,
        peak_pss_gb=peaks[0] / 1e9 if got else None,
        peak_rss_gb=peaks[1] / 1e9 if got else None,
        peak_worker_uss_gb=peaks[2] / 1e9 if got else None,
        peak_worker_shared_gb=peaks[3] / 1e9 if got else None,
        max_rss_gb=max_rss,
        cpu_s=usage.ru_utime + usage.ru_stime - cpu0,
        samples=samples,
        peak_parent_pss_gb=peaks[5] / 1e9 if got else None,
        peak_children_pss_gb=peaks[6] / 1e9 if got else None,
        peak_pss_at_s=at_s if got else None,
        peak_pss_parent_gb=parent_at_peak / 1e9 if got else None,
    )


def machine_cpu_seconds() -> float | None:
    """CPU time (seconds) every process of the machine has used since boot (``/proc/stat``:
    all but idle and I/O wait), or None where that file does not exist.

    The difference over a run, minus the run's own :attr:`RunStats.cpu_s`, is what other
    processes used meanwhile: on a shared machine it says how much a wall time was disturbed.
    """
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    # guest time is already inside user and nice
    busy = sum(ticks[:8]) - idle if len(ticks) >= 8 else sum(ticks) - idle
    return busy / os.sysconf("SC_CLK_TCK")


def with_load(run: Callable[[], RunStats]) -> tuple[RunStats, float]:
    """``run()``'s stats and the cores other processes used meanwhile (mean over its wall time;
    0 where :func:`machine_cpu_seconds` cannot tell)."""
    before = machine_cpu_seconds()
    stats = run()
    after = machine_cpu_seconds()
    others = (
        0.0
        if before is None or after is None
        else max(0.0, (after - before - stats.cpu_s) / stats.wall_s)
    )
    return stats, others


def print_round(what: str, r: int, run: tuple[RunStats, float]) -> None:
    """One line of a measured round ``r`` (from 0) of ``what``: wall and CPU seconds, peak PSS
    (GB) and the cores the other processes used meanwhile (:func:`with_load`)."""
    stats, others = run
    print(
        f"{what}, round {r + 1}: {stats.wall_s:.1f} s ({stats.cpu_s:.0f} s of CPU, peak PSS "
        f"{stats.peak_pss_gb} GB; other processes: {others:.2f} cores)",
        flush=True,
    )
