"""A Delta table's own record of what it received: the ``txn`` actions of its ``_delta_log``,
read through fsspec (no Spark, no Delta library).

Delta records ``{"txn": {"appId", "version", "lastUpdated"}}`` in the same atomic commit as the
rows it guards. The Delta streaming sink writes ``appId = <query id>``, ``version = <batch id>``
with every batch (an empty batch too); idempotent writes in ``foreachBatch`` write the
``txnAppId``/``txnVersion`` options. A ``txn`` for (appId, version) in the log therefore proves
the table holds that batch completely, and Delta skips any later write of that appId whose
version is not above the recorded one.

Layout read here: commits ``<20 digits>.json`` (one JSON action per line); classic checkpoints
``<v>.checkpoint.parquet`` and multi-part ``<v>.checkpoint.<part>.<parts>.parquet``; V2
checkpoints ``<v>.checkpoint.<uuid>.json|parquet`` (their ``txn`` actions are in that file, not
in sidecars). ``.crc`` files, ``_staged_commits/`` and log compactions are not needed. Parquet
checkpoints are read with pyarrow (the ``spark`` extra); a table whose checkpoint cannot be read
raises :class:`SinkLogUnreadable`.
"""

from __future__ import annotations

import logging
import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import JsonTooLarge, SinkLogUnreadable
from airflow_ckpt_provider.checkpoint.jsonin import load_json
from airflow_ckpt_provider.storage.listing import list_names

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_V2 = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)$")


@dataclass(frozen=True)
class DeltaTxn:
    """One ``txn`` action: ``app_id``'s ``version`` (a batch id), recorded by table version
    ``table_version`` (for an entry taken from a checkpoint: that checkpoint's version, the
    latest it can be)."""

    app_id: str
    version: int
    table_version: int

    def to_dict(self) -> dict[str, Any]:
        return {"app_id": self.app_id, "version": self.version, "table_version": self.table_version}


@dataclass(frozen=True)
class LogListing:
    """The files of ``_delta_log`` that matter: commit files and complete checkpoints by version."""

    commits: Mapping[int, str]
    checkpoints: Mapping[int, tuple[str, ...]]

    @property
    def latest(self) -> int | None:
        versions = list(self.commits) + list(self.checkpoints)
        return max(versions) if versions else None

    def checkpoint_at_or_before(self, version: int) -> int | None:
        found = [v for v in self.checkpoints if v <= version]
        return max(found) if found else None


class DeltaLog:
    """The ``_delta_log`` of the Delta table at ``table_path`` on ``fs`` (``uri`` for messages)."""

    def __init__(self, fs: AbstractFileSystem, table_path: str, *, uri: str | None = None) -> None:
        self.fs = fs
        self.table_path = table_path.rstrip("/")
        self.log_path = posixpath.join(self.table_path, LOG_DIR)
        self.uri = uri or table_path

    def exists(self) -> bool:
        """Whether the table has a log with at least one commit or checkpoint."""
        return self.listing().latest is not None

    def listing(self) -> LogListing:
        try:
            names = [posixpath.basename(n) for n in list_names(self.fs, self.log_path)]
        except FileNotFoundError:
            return LogListing({}, {})
        except OSError as exc:
            raise SinkLogUnreadable(found=f"{type(exc).__name__}: {exc}", expected="a readable _delta_log",
                                    path=self.uri) from None
        commits: dict[int, str] = {}
        parts: dict[int, dict[int, str]] = {}
        totals: dict[int, int] = {}
        for name in names:
            if match := _COMMIT.match(name):
                commits[int(match.group(1))] = name
            elif match := _CLASSIC.match(name):
                version = int(match.group(1))
                part, total = (int(match.group(2)), int(match.group(3))) if match.group(2) else (1, 1)
                parts.setdefault(version, {})[part] = name
                totals[version] = total
            elif match := _V2.match(name):
                version = int(match.group(1))
                parts.setdefault(version, {})[1] = name
                totals[version] = 1
        checkpoints = {v: tuple(p[i] for i in sorted(p)) for v, p in parts.items() if len(p) == totals[v]}
        return LogListing(commits, checkpoints)

    def _read(self, name: str) -> bytes:
        path = posixpath.join(self.log_path, name)
        try:
            with self.fs.open(path, "rb") as handle:
                return bytes(handle.read())
        except OSError as exc:
            raise SinkLogUnreadable(found=f"{name}: {type(exc).__name__}: {exc}", expected="a readable Delta log file",
                                    path=self.uri) from None

    def commit_txns(self, version: int, name: str | None = None) -> list[DeltaTxn]:
        """The ``txn`` actions of commit ``version``."""
        name = name or f"{version:020d}.json"
        found: list[DeltaTxn] = []
        for number, line in enumerate(self._read(name).decode("utf-8", "replace").splitlines(), start=1):
            if '"txn"' not in line:
                continue
            try:
                action = load_json(line, what=f"Delta log {name} line {number}", path=self.uri)
            except JsonTooLarge:
                raise
            except ValueError:
                raise SinkLogUnreadable(found=f"{name} line {number} is not JSON", expected="one JSON action per line",
                                        path=self.uri) from None
            txn = action.get("txn") if isinstance(action, dict) else None
            if isinstance(txn, dict):
                found.append(_txn(txn, version, where=f"{name} line {number}", uri=self.uri))
        return found

    def _checkpoint_txns(self, version: int, names: tuple[str, ...]) -> list[DeltaTxn]:
        found: list[DeltaTxn] = []
        for name in names:
            data = self._read(name)
            if name.endswith(".json"):
                for line in data.decode("utf-8", "replace").splitlines():
                    if '"txn"' in line:
                        action = load_json(line, what=f"Delta checkpoint {name}", path=self.uri)
                        txn = action.get("txn") if isinstance(action, dict) else None
                        if isinstance(txn, dict):
                            found.append(_txn(txn, version, where=name, uri=self.uri))
                continue
            for txn in _parquet_txns(data, name, self.uri):
                found.append(_txn(txn, version, where=name, uri=self.uri))
        return found

    def transactions(self, listing: LogListing | None = None) -> dict[str, DeltaTxn]:
        """The latest ``txn`` of every appId in the table's current snapshot: the newest complete
        checkpoint's, then every commit after it (a later commit wins)."""
        listing = listing or self.listing()
        latest = listing.latest
        if latest is None:
            return {}
        base = listing.checkpoint_at_or_before(latest)
        txns: dict[str, DeltaTxn] = {}
        if base is not None:
            for txn in self._checkpoint_txns(base, listing.checkpoints[base]):
                txns[txn.app_id] = txn
        start = base + 1 if base is not None else 0
        missing = [v for v in range(start, latest + 1) if v not in listing.commits]
        if missing:
            raise SinkLogUnreadable(found=f"commit(s) {_ranges(missing)} missing after "
                                          f"{'checkpoint ' + str(base) if base is not None else 'the start'}",
                                    expected="every commit after the newest checkpoint", path=self.uri)
        for version in range(start, latest + 1):
            for txn in self.commit_txns(version, listing.commits[version]):
                txns[txn.app_id] = txn
        return txns

    def recent_txns(self, app_id: str, *, max_commits: int = 1000,
                    listing: LogListing | None = None) -> Iterator[DeltaTxn]:
        """``app_id``'s ``txn`` actions from the newest commit backwards, over at most
        ``max_commits`` commit files that are still in the log."""
        listing = listing or self.listing()
        for version in sorted(listing.commits, reverse=True)[:max_commits]:
            for txn in self.commit_txns(version, listing.commits[version]):
                if txn.app_id == app_id:
                    yield txn


def _txn(raw: Mapping[str, Any], table_version: int, *, where: str, uri: str) -> DeltaTxn:
    app_id, version = raw.get("appId"), raw.get("version")
    if not isinstance(app_id, str) or not isinstance(version, int) or isinstance(version, bool):
        raise SinkLogUnreadable(found=f"txn {dict(raw)!r} in {where}",
                                expected="txn with a string appId and an integer version", path=uri)
    return DeltaTxn(app_id=app_id, version=version, table_version=table_version)


def _parquet_txns(data: bytes, name: str, uri: str) -> list[Mapping[str, Any]]:
    try:
        import io

        import pyarrow.parquet as pq
    except ImportError:
        raise SinkLogUnreadable(found=f"Delta checkpoint {name} and no pyarrow installed",
                                expected="pyarrow to read Delta's Parquet checkpoints",
                                action="Install the provider's spark extra (or pyarrow); nothing was changed.",
                                path=uri) from None
    try:
        table = pq.read_table(io.BytesIO(data), columns=["txn"])
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise SinkLogUnreadable(found=f"Delta checkpoint {name}: {exc}", expected="a readable Parquet checkpoint",
                                path=uri) from None
    return [row for row in table.column("txn").to_pylist() if row]


def _ranges(numbers: list[int]) -> str:
    return f"{numbers[0]}-{numbers[-1]}" if len(numbers) > 1 else str(numbers[0])
