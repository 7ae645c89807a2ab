"""Extraction on a backend: on a local Dask cluster the same shards as on processes, resume, CLI dispatch."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from featurestore.cli import main
from featurestore.demo import build_demo
from featurestore.extraction.config import FeatureConfig
from featurestore.extraction.many import extract_many
from featurestore.parallel.dask import dask_client
from featurestore.sources.manifest import scan
from featurestore.storage.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHANNELS = ["face_geom", "egemaps"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    build_demo(out, n_listeners=2, stories=(1, 2), duration_s=4, progress=False)
    return out


def _shard_contents(path) -> dict[str, object]:
    """Every dataset (arrays) and the provenance attributes that do not depend on the run time."""
    out: dict[str, object] = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj[()]
        for k, v in obj.attrs.items():
            if k != "created_utc":
                out[f"{name}@{k}"] = v

    with h5py.File(path, "r") as f:
        out.update({f"@{k}": v for k, v in f.attrs.items() if k != "created_utc"})
        f.visititems(visit)
    return out


def test_dask_extraction_matches_local_and_resumes(corpus, tmp_path, capsys):
    sessions = scan(corpus).sessions
    assert len(sessions) == 4
    cfg = FeatureConfig()
    local = extract_many(sessions, tmp_path / "local", CHANNELS, cfg, jobs=1)
    seen = []
    dask = extract_many(
        sessions,
        tmp_path / "dask",
        CHANNELS,
        cfg,
        backend="dask",
        jobs=2,
        on_result=seen.append,
        progress=False,
    )

    assert [r.session for r in dask] == [
        s.session for s in sessions
    ]  # session order, whatever finished first
    assert sorted(r.session for r in seen) == sorted(s.session for s in sessions)
    assert all(r.status == "ok" for r in local + dask), [
        (r.session, r.error) for r in dask if r.failed
    ]
    assert [sorted(r.computed) for r in dask] == [sorted(r.computed) for r in local]

    a, b = Store(tmp_path / "local"), Store(tmp_path / "dask")
    assert a.list_sessions() == b.list_sessions() == [s.session for s in sessions]
    assert not b.temp_files()
    for s in a.list_sessions():
        keys = a.cache_keys(s)
        assert keys and keys == b.cache_keys(s)
        ca, cb = _shard_contents(a.shard_path(s)), _shard_contents(b.shard_path(s))
        assert ca.keys() == cb.keys()
        for k, va in ca.items():
            if isinstance(va, np.ndarray):
                np.testing.assert_array_equal(va, cb[k], err_msg=f"{s}:{k}")
            else:
                assert va == cb[k], f"{s}:{k}"

    # the CLI dispatches --backend dask; everything is current, so every session is skipped
    capsys.readouterr()
    args = [
        "extract",
        str(corpus),
        "--store",
        str(tmp_path / "dask"),
        "--channels",
        *CHANNELS,
        "--backend",
        "dask",
        "--jobs",
        "1",
    ]
    assert main(args) == 0
    assert "0 extracted, 4 already current, 0 failed" in capsys.readouterr().out


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    with pytest.raises(ConnectionError, match="dask scheduler"):
        with dask_client("tcp://127.0.0.1:9", connect_timeout_s=1):
            pass


def _listening(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state owned by one of ``pids``."""
    import psutil

    out = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        out += [(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return out


def test_local_cluster_listens_on_loopback_only():
    """The scheduler, its HTTP endpoint and every worker of the local cluster bind 127.0.0.1,
    never all interfaces (a scheduler's web page serves its logs and worker list)."""
    import psutil

    me = psutil.Process()
    with dask_client(n_workers=1) as client:
        info = client.scheduler_info()
        assert info["address"].startswith("tcp://127.0.0.1:")
        assert all(a.startswith("tcp://127.0.0.1:") for a in info["workers"])
        pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
        bound = _listening(pids)
    assert bound  # the scheduler at least
    assert all(ip in ("127.0.0.1", "::1") for ip, _ in bound), bound
