"""The examples of the README and docs/ run as printed, where they are cheap.

- every YAML block that is a config (an experiment config, or a ``featurestore.yaml``) loads,
  the experiment ones checked against a small store as ``--store`` would;
- every ``--set KEY=VALUE`` quoted in the pages is a valid override (of the experiment config
  or of ``featurestore.yaml``, whichever has the key);
- the README's Python block runs against a small store, its statements in order, except the
  two that start a whole sweep and a whole ablation (the studies' tests run those).

The Makefile targets of the bash blocks (``make demo``, ``make features``) take minutes; they
are what ``make demo`` and the install test run.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from experiments.config.loading import load_config
from experiments.config.options import ConfigWarning
from experiments.config.schema import TOP_KEYS
from experiments.studies.session_config import load_session_config
from featurestore.extraction.config import load_feature_config
from featurestore.storage.store import Store
from tests.experiments.helpers import N_FRAMES, build_store

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def blocks(lang: str) -> list[tuple[str, str]]:
    """(page:line, body) of every fenced block in ``lang``."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            if m.group(1) == lang:
                out.append((f"{page.name}:{text[: m.start()].count(chr(10)) + 1}", m.group(2)))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' small store, with an observer rating as the README's agreement example needs."""
    root = tmp_path_factory.mktemp("doc_store")
    st = build_store(root)
    rng = np.random.default_rng(0)
    for s in st.list_sessions():
        y = np.clip(st.labels(s).to_numpy() + rng.normal(0, 0.2, N_FRAMES), -1, 1)
        st.write_session(st.meta(s), labels={"valence_observer_listener": y.astype(np.float32)})
    return root


def test_every_yaml_config_block_loads(tmp_path: Path, store: Path) -> None:
    found = blocks("yaml")
    assert len(found) >= 4
    for where, body in found:
        path = tmp_path / "block.yaml"
        path.write_text(body)
        if "face_fps" in body or "extractors:" in body or body.startswith("# featurestore.yaml"):
            load_feature_config(path)
            continue
        if body.startswith("# experiments sessions"):
            load_session_config(path)  # a whole-session rating's config (experiments sessions)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConfigWarning)  # a partial example may leave keys out
            try:
                # an Optuna search or a manifest corpus's config (splits: shard) is not the demo's
                demo = "search:" not in body and "splits: shard" not in body
                load_config(path, store=store if demo else None)
            except Exception as e:  # noqa: BLE001 - name the block that failed
                pytest.fail(f"{where}: {e}")


def test_every_set_option_quoted_in_the_pages_is_valid() -> None:
    quoted = set()
    for page in PAGES:
        for m in re.finditer(
            r"--set ([a-z_][a-z0-9_.]*=(?:\[[^\]`]*\]|[^\s`,;)]+))", page.read_text()
        ):
            quoted.add(m.group(1))
    assert len(quoted) >= 8, quoted
    for text in sorted(quoted):
        key = text.split("=", 1)[0].split(".")[0]
        if key in TOP_KEYS:
            config = "ablation" if key == "feature_set" else "default"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConfigWarning)
                load_config(config, overrides=[text])
        else:
            load_feature_config(overrides=[text])


def test_the_readme_python_block_runs(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (body,) = [b for w, b in blocks("python") if w.startswith("README.md")]
    statements = [
        line
        for line in body.splitlines()
        if line.strip()
        and not line.startswith("#")
        and "run_sweep(cfg" not in line
        and "ablate(load_config" not in line
    ]
    assert len(statements) >= 10
    monkeypatch.chdir(ROOT)  # the block names experiments/configs/default.yaml
    code = "\n".join(statements).replace('"features"', repr(str(store)))
    namespace: dict = {}
    exec(compile(code, "README.md python block", "exec"), namespace)
    assert isinstance(namespace["store"], Store) and namespace["cfg"].window.delay_s == [2.0]
