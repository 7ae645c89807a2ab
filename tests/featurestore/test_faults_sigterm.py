"""SIGTERM stops either command line while it reads a long config, through the interrupt path:
a message, exit 143, no traceback (featurestore printed a KeyboardInterrupt traceback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from featurestore.processes import EXIT_TERMINATED

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def handles_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has installed a SIGTERM handler (its caught-signals mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(ln for ln in status.splitlines() if ln.startswith("SigCgt:")).split()[1], 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize(
    ("program", "args", "message"),
    [
        ("featurestore.cli", ["scan", "{data}", "--config", "{config}"], "featurestore scan: "),
        (
            "experiments.cli",
            ["sweep", "--config", "{config}", "--print-config"],
            "experiments sweep: ",
        ),
    ],
)
def test_sigterm_while_reading_a_long_config_exits_143_with_a_message(
    tmp_path, program, args, message
):
    config = tmp_path / "long.yaml"  # a million numbers: tens of seconds of YAML parsing
    config.write_text("face_fps: [" + ", ".join(map(str, range(1_000_000))) + "]\n")
    data = tmp_path / "data"
    data.mkdir()
    argv = [a.format(data=data, config=config) for a in args]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", program, *argv],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not handles_sigterm(proc.pid):
            time.sleep(0.05)
        time.sleep(1.0)  # into the config's reading
        assert proc.poll() is None, f"ended before the signal: {proc.stderr.read()[-2000:]}"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)  # the parse alone takes far longer
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert code == EXIT_TERMINATED, err[-2000:]
    assert f"{message}terminated (SIGTERM)" in err and "re-run" in err
    assert "Traceback" not in err


@pytest.fixture
def sigterm_handler():
    """The command lines' SIGTERM handler installed in this process, removed afterwards."""
    from featurestore import processes

    previous = signal.getsignal(signal.SIGTERM)
    processes.terminate_as_interrupt()
    yield processes
    signal.signal(signal.SIGTERM, previous)
    processes._RECEIVED.clear()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigterm_swallowed_by_a_c_callback_still_stops_the_next_step(sigterm_handler):
    """openSMILE calls back into Python through ctypes; a SIGTERM handled there raises inside
    the callback, which ctypes prints and ignores (extract then ran to its end, exit 0). The
    signal is remembered, and the next step raises it again."""
    import ctypes

    libc = ctypes.CDLL(None)
    compare = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)
    )
    calls: list[int] = []
    sent: list[int] = []

    def cmp(a, b):  # the signal arrives while C code runs this callback
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here: Terminated raised inside the callback
        calls.append(1)
        return a[0] - b[0]

    values = (ctypes.c_int * 5)(5, 1, 4, 2, 3)
    libc.qsort(values, len(values), ctypes.sizeof(ctypes.c_int), compare(cmp))
    assert calls  # the C call went on calling back: the exception was swallowed
    with pytest.raises(sigterm_handler.Terminated):
        sigterm_handler.raise_if_terminated()


def test_extraction_in_one_process_stops_before_the_next_session(sigterm_handler, tmp_path):
    from featurestore.extraction.config import FeatureConfig
    from featurestore.extraction.many import extract_many
    from featurestore.sources.manifest import SessionFiles

    sigterm_handler._RECEIVED.append(signal.SIGTERM)  # as if swallowed during the session before
    session = SessionFiles("Subject_1_Story_1", listener=1, story=1, speaker=0, split="train")
    with pytest.raises(sigterm_handler.Terminated):
        extract_many([session], tmp_path / "store", ["egemaps"], FeatureConfig(), jobs=1)
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").glob("*.h5"))


def test_no_file_is_committed_once_a_sigterm_arrived(sigterm_handler, tmp_path):
    """A SIGTERM swallowed during a one-process extract's session: its shard is not renamed
    into place (nor any other atomic write), and its temporary file goes."""
    from featurestore.files import write_atomic

    sigterm_handler._RECEIVED.append(signal.SIGTERM)
    with pytest.raises(sigterm_handler.Terminated):
        write_atomic(tmp_path / "Subject_1_Story_1.h5", b"a shard")
    assert list(tmp_path.iterdir()) == []


def test_sigterm_stops_a_parallel_extract_at_once_keeping_finished_shards(tiny_demo, tmp_path):
    """extract --jobs 2 took 15-19 s after a SIGTERM and wrote every session already queued to
    its workers; now the workers are killed at once: exit 143, no shard after the signal."""
    import psutil

    from featurestore.storage.store import Store

    store = tmp_path / "store"
    log = tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "featurestore.cli", "extract", str(tiny_demo[0])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [*cmd, "--store", str(store), "--jobs", "2"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            deadline = time.monotonic() + 180
            while (
                time.monotonic() < deadline
                and proc.poll() is None
                and not Store(store).list_sessions()
            ):
                time.sleep(0.02)
            workers = psutil.Process(proc.pid).children()
            signalled = time.time()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
            took = time.time() - signalled
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert code == EXIT_TERMINATED, text[-2000:]
    assert took < 5 + 3, (
        f"{took:.1f} s from SIGTERM to exit"
    )  # the bound plus a loaded machine's margin
    shards = Store(store).list_sessions()
    assert 1 <= len(shards) < 4, "the signal should land between the first and the last shard"
    late = [s for s in shards if Store(store).shard_path(s).stat().st_mtime > signalled]
    assert late == [], f"shards written after the signal: {late}"
    assert Store(store).temp_files() == []
    assert workers and not psutil.wait_procs(workers, timeout=5)[1]  # every worker gone
    assert "Traceback" not in text and "leaked" not in text and "re-run to resume" in text
