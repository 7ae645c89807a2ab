"""Claims: concurrent sweeps of one experiment run each configuration once (docs/scaling.md,
MLflow with many writers). A claim lasts while its sweep runs: on SQLite a file per configuration
under ``<folder>/claims/<experiment id>/`` naming its host and pid, created under the database's
lock file (one whose process is gone is taken over); on PostgreSQL a session advisory lock, which
the server releases with the connection; through a tracking server or another database, none.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from featurestore.files import file_lock
from featurestore.processes import pid_alive


def _advisory_key(experiment_id: str, config_hash: str) -> int:
    digest = hashlib.sha256(f"claim:{experiment_id}:{config_hash}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class Claims:
    """The configurations this process has claimed in one experiment (see the module docstring);
    :meth:`close` (or the end of the process) gives them back."""

    def __init__(self, uri: str, experiment_id: str) -> None:
        self.uri, self.experiment_id = uri, str(experiment_id)
        self.held: set[str] = set()
        self.folder: Path | None = None
        self._engine: Any = None
        self._conn: Any = None
        if uri.startswith("sqlite:///"):
            db = Path(uri[len("sqlite:///") :])
            self.folder = db.parent / "claims" / self.experiment_id
            self.lock = db.with_suffix(".lock")
        elif uri.split("://", 1)[0].lower().startswith("postgres"):
            import sqlalchemy  # with mlflow: only where runs are logged

            self._engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)

    def take(self, config_hashes: Iterable[str]) -> set[str]:
        """Claim every configuration of ``config_hashes`` that no other live sweep holds; returns
        those now held by this process (all of them where the store keeps no claims)."""
        hashes = list(dict.fromkeys(config_hashes))
        if self.folder is not None:
            got = self._take_files(hashes)
        elif self._engine is not None:
            got = self._take_advisory(hashes)
        else:
            got = set(hashes)
        self.held |= got
        return got

    def _take_files(self, hashes: list[str]) -> set[str]:
        assert self.folder is not None
        me = f"{socket.gethostname()} {os.getpid()}"
        got = set()
        with file_lock(self.lock):
            self.folder.mkdir(parents=True, exist_ok=True)
            for h in hashes:
                path = self.folder / h
                if h not in self.held and path.exists() and self._alive(path):
                    continue
                path.write_text(me)
                got.add(h)
        return got

    @staticmethod
    def _alive(path: Path) -> bool:
        """Whether the claim at ``path`` is held by a live process (another host's: assumed so)."""
        try:
            host, pid = path.read_text().split()
        except (OSError, ValueError):
            return False  # gone meanwhile, or half written by a process killed then
        if host != socket.gethostname():
            return True
        return int(pid) != os.getpid() and pid_alive(int(pid))

    def _take_advisory(self, hashes: list[str]) -> set[str]:
        import sqlalchemy  # with mlflow: only where runs are logged

        if self._conn is None:
            self._conn = self._engine.connect()
        query = sqlalchemy.text("SELECT pg_try_advisory_lock(:k)")

        def lock(h: str) -> bool:
            locked = self._conn.execute(query, {"k": _advisory_key(self.experiment_id, h)}).scalar()
            self._conn.commit()
            return bool(locked)

        return {h for h in hashes if h in self.held or lock(h)}

    def close(self) -> None:
        """Give back every claim this process holds (best effort: a dead process's claims lapse)."""
        if self.folder is not None:
            for h in self.held:
                with contextlib.suppress(OSError):
                    path = self.folder / h
                    if path.read_text().split()[-1] == str(os.getpid()):
                        path.unlink()
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing the session releases its advisory locks
                self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
        self.held.clear()
