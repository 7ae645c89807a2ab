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
