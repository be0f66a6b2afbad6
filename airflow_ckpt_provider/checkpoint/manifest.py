"""Value objects of a checkpoint archive: the manifest, archive names, listing entries, retention.
Pure: no I/O here.

An archive of stream ``S`` made for upgrade ``U`` lives at
``<archive_root>/S/<YYYYmmddTHHMMSSZ>-U/`` and holds::

    _intent.json     written first: what is being archived, by whom, from where (:class:`ArchiveIntent`)
    checkpoint/...   the checkpoint's files, byte for byte
    manifest.json    written LAST, after the copy was verified: the archive is complete

An archive without ``manifest.json`` is incomplete and must never be restored from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from airflow_ckpt_provider.checkpoint.errors import InvalidArchiveIntent, InvalidArchiveManifest, UnsafeStreamName
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.secrets import redact_conf
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, array_of, one_of

MANIFEST = "manifest.json"
INTENT = "_intent.json"
#: the format of ``_intent.json`` (:class:`ArchiveIntent`); the previous release wrote it without one (format 0)
INTENT_FORMAT = 1
DATA_DIR = "checkpoint"
#: on an object store (no rename), a restore target holds this marker from before its first file
#: until after its verification: the reader refuses a location that holds it (IncompleteRestore)
RESTORE_MARKER = "_restore_incomplete.json"

_SAFE = re.compile(r"[A-Za-z0-9._-]+\Z")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_DIR_NAME = re.compile(r"(?P<stamp>\d{8}T\d{6}Z)-(?P<upgrade>.+)\Z")
_STAMP = "%Y%m%dT%H%M%SZ"
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


def check_name(value: object, what: str = "stream name") -> str:
    """``value`` if it is one safe path segment; :class:`UnsafeStreamName` otherwise.

    Refused: empty, ``.``/``..`` or anything with ``..``, ``/``, ``\\``, a drive or scheme
    (``:``), whitespace or other characters outside ``[A-Za-z0-9._-]``, more than 200 chars.
    """
    text = value if isinstance(value, str) else ""
    if not text or len(text) > 200 or ".." in text or text == "." or not _SAFE.match(text):
        raise UnsafeStreamName(found=f"{what} {value!r}",
                               expected=f"a {what} that is one safe path segment")
    return text


def sanitize_upgrade_id(text: str) -> str:
    """A safe upgrade id from free text (e.g. an Airflow run id ``manual__2026-11-21T20:05:12+00:00``)."""
    cleaned = _UNSAFE_CHARS.sub("-", text).replace("..", ".").strip(".-")[:120]
    return check_name(cleaned or "run", "upgrade id")


def archive_dir_name(started_at: datetime, upgrade_id: str) -> str:
    """``<YYYYmmddTHHMMSSZ>-<upgrade id>``: sorts by time; one directory per upgrade id."""
    return f"{started_at.astimezone(timezone.utc).strftime(_STAMP)}-{check_name(upgrade_id, 'upgrade id')}"


def parse_dir_name(name: str) -> tuple[datetime, str] | None:
    """(start time, upgrade id) of an archive directory name; None for other names."""
    match = _DIR_NAME.match(name)
    if not match:
        return None
    try:
        stamp = datetime.strptime(match["stamp"], _STAMP).replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return stamp, match["upgrade"]


def safe_relative(path: object) -> bool:
    """True for a relative POSIX path without empty, ``.`` or ``..`` segments."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


@dataclass(frozen=True)
class ArchivedFile:
    """One checkpoint file: path relative to the checkpoint root, size in bytes, SHA-256 hex."""

    path: str
    size: int
    sha256: str

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> ArchivedFile:
        """One entry of a manifest's ``files``; :class:`InvalidArchiveManifest` on anything else."""
        return cls(**_FILE.decode(data))


def _corrupt(found: str, expected: str) -> InvalidArchiveManifest:
    return InvalidArchiveManifest(found=found, expected=expected)


@dataclass(frozen=True)
class ArchiveManifest:
    """What an archive holds and why it was made; written last, after verification.

    ``files`` are sorted by path; ``empty_dirs`` are directories without files (Spark's empty
    ``commits/`` or state folders) so a restore recreates the tree exactly. ``spark_conf`` is the
    conf of the last committed batch's offsets file, secrets redacted (:func:`redact_conf`: a
    manifest is read by more people than the checkpoint). ``handover`` is the handover the archive was
    taken for (None if none was given and none could be computed).
    """

    FORMAT: ClassVar[int] = 1
    HASH: ClassVar[str] = "sha256"

    stream_name: str
    upgrade_id: str
    name: str
    source_uri: str
    archive_uri: str
    query_id: str | None
    last_committed_batch: int | None
    handover: Handover | None
    spark_conf: Mapping[str, str]
    files: tuple[ArchivedFile, ...]
    empty_dirs: tuple[str, ...]
    created_by: str
    reason: str
    dag_run_id: str
    started_at: str
    completed_at: str
    provider_version: str
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(sorted(self.files, key=lambda f: f.path)))
        object.__setattr__(self, "empty_dirs", tuple(sorted(self.empty_dirs)))
        object.__setattr__(self, "spark_conf", redact_conf(self.spark_conf))
        for entry in self.files:
            if not safe_relative(entry.path):
                raise _corrupt(f"file path {entry.path!r}", "relative paths inside the checkpoint")
            if not isinstance(entry.size, int) or isinstance(entry.size, bool) or entry.size < 0:
                raise _corrupt(f"size {entry.size!r} of {entry.path}", "a non-negative integer")
            if not isinstance(entry.sha256, str) or not _HEX64.match(entry.sha256):
                raise _corrupt(f"sha256 {entry.sha256!r} of {entry.path}", "64 lowercase hex digits")
        if len({f.path for f in self.files}) != len(self.files):
            raise _corrupt("duplicate file paths", "each file once")
        if not all(safe_relative(d) for d in self.empty_dirs):
            raise _corrupt(f"empty dirs {list(self.empty_dirs)[:3]}", "relative paths")

    @property
    def file_count(self) -> int:
        return len(self.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def summary(self) -> dict[str, Any]:
        """Small JSON-able dict for XCom and the command line (no per-file list)."""
        return {
            "location": self.archive_uri,
            "stream_name": self.stream_name,
            "upgrade_id": self.upgrade_id,
            "source_uri": self.source_uri,
            "query_id": self.query_id,
            "last_committed_batch": self.last_committed_batch,
            "file_count": self.file_count,
            "total_bytes": self.total_bytes,
            "handover": self.handover.to_dict() if self.handover else None,
            "created_by": self.created_by,
            "reason": self.reason,
            "dag_run_id": self.dag_run_id,
            "completed_at": self.completed_at,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.FORMAT,
            "hash": self.HASH,
            "stream_name": self.stream_name,
            "upgrade_id": self.upgrade_id,
            "name": self.name,
            "source_uri": self.source_uri,
            "archive_uri": self.archive_uri,
            "query_id": self.query_id,
            "last_committed_batch": self.last_committed_batch,
            "handover": self.handover.to_dict() if self.handover else None,
            "spark_conf": dict(self.spark_conf),
            "file_count": self.file_count,
            "total_bytes": self.total_bytes,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
            "empty_dirs": list(self.empty_dirs),
            "created_by": self.created_by,
            "reason": self.reason,
            "dag_run_id": self.dag_run_id,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
            "provider_version": self.provider_version,
            "extra": dict(self.extra),
        }

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> ArchiveManifest:
        """Parse :meth:`to_json` output (``manifest.json``, format 1) through its strict codec;
        :class:`InvalidArchiveManifest` (an :class:`ArchiveCorrupt` naming ``manifest.json``)
        otherwise, also when ``file_count`` / ``total_bytes`` differ from the files listed."""
        values = _MANIFEST.decode(data)
        counted = values.pop("file_count"), values.pop("total_bytes")
        manifest = cls(**values)
        if counted != (manifest.file_count, manifest.total_bytes):
            raise _corrupt(f"file_count {counted[0]} / total_bytes {counted[1]}",
                           f"{manifest.file_count} files / {manifest.total_bytes} bytes as listed")
        return manifest


# -- the codecs of the manifest and its files (airflow_ckpt_provider.records.codec) -------------------
# manifest.json is format 1 with every key below; construction checks the files' paths and hashes.

_FILE = Codec("archived file", InvalidArchiveManifest, {
    "path": Field((str,)), "size": Field((int,)), "sha256": Field((str,)),
}, version=None)
_TEXT, _COUNT = Field((str,)), Field((int,))
_MANIFEST = Codec("ArchiveManifest", InvalidArchiveManifest, {
    "hash": Field((str,), decode=one_of(ArchiveManifest.HASH), derived=True),
    **{name: _TEXT for name in ("stream_name", "upgrade_id", "name", "source_uri", "archive_uri")},
    "query_id": Field((str,), nullable=True),
    "last_committed_batch": Field((int,), nullable=True),
    "handover": Field((dict,), nullable=True, decode=Handover.from_json),
    "spark_conf": Field((dict,)),
    "file_count": _COUNT,
    "total_bytes": _COUNT,
    "files": Field((list,), decode=array_of(dict, decode=ArchivedFile.from_json)),
    "empty_dirs": Field((list,), decode=array_of(str)),
    **{name: _TEXT for name in ("created_by", "reason", "dag_run_id", "started_at", "completed_at",
                                "provider_version")},
    "extra": Field((dict,)),
}, version=ArchiveManifest.FORMAT)


@dataclass(frozen=True)
class ArchiveIntent:
    """``_intent.json``, written before the first file is copied (format :data:`INTENT_FORMAT`; a file
    without a format number is the previous release's, read as format 0): which stream and upgrade
    the archive is for, the checkpoint it copies, when it started, by whom and why. A resumed
    archive must be of the same checkpoint."""

    stream_name: str
    upgrade_id: str
    source_uri: str
    started_at: str
    created_by: str
    reason: str = ""
    dag_run_id: str = ""

    def to_json(self) -> str:
        return json.dumps(_INTENT.encode(asdict(self)), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes, *, path: str = "") -> ArchiveIntent:
        """Decode ``_intent.json`` through its codec; :class:`InvalidArchiveIntent` (naming ``path``)
        when it is not this record."""
        try:
            return cls(**_INTENT.decode(data))
        except InvalidArchiveIntent as exc:
            raise InvalidArchiveIntent(found=exc.found, expected=exc.expected, path=path or None) from None


_INTENT = Codec("archive intent", InvalidArchiveIntent, {
    name: _TEXT for name in ("stream_name", "upgrade_id", "source_uri", "started_at", "created_by", "reason",
                             "dag_run_id")
}, version=INTENT_FORMAT, versions=(UNVERSIONED,))


@dataclass(frozen=True)
class ArchiveInfo:
    """One archive directory as listed: complete (has a manifest) or not.

    ``path`` is the path inside the archive filesystem, ``uri`` the location as the user named it.
    """

    stream_name: str
    name: str
    path: str
    started_at: datetime
    upgrade_id: str
    complete: bool
    file_count: int | None = None
    total_bytes: int | None = None
    uri: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"stream_name": self.stream_name, "name": self.name, "path": self.path, "uri": self.uri or self.path,
                "started_at": self.started_at.isoformat(), "upgrade_id": self.upgrade_id,
                "complete": self.complete, "file_count": self.file_count, "total_bytes": self.total_bytes}


@dataclass(frozen=True)
class RetentionPlan:
    """``keep`` and ``remove`` hold complete archives; ``stale_incomplete`` incomplete ones older than T."""

    keep: tuple[ArchiveInfo, ...]
    remove: tuple[ArchiveInfo, ...]
    stale_incomplete: tuple[ArchiveInfo, ...]
    recent_incomplete: tuple[ArchiveInfo, ...] = ()


def plan_retention(
    archives: Iterable[ArchiveInfo],
    *,
    keep_last: int | None = None,
    keep_newer_than: timedelta | None = None,
    incomplete_older_than: timedelta | None = None,
    now: datetime,
) -> RetentionPlan:
    """Which archives of ONE stream to keep and which to remove.

    A complete archive is kept if it is among the ``keep_last`` newest or younger than
    ``keep_newer_than``; with neither given everything is kept. The newest complete (verified)
    archive is always kept. Incomplete archives are never in ``remove``: those older than
    ``incomplete_older_than`` (default ``keep_newer_than``, else one day) are reported as stale
    (a younger one may be a copy in progress).
    """
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0):
        raise ValueError(f"keep_last must be a non-negative integer, not {keep_last!r}")
    items = sorted(archives, key=lambda a: (a.started_at, a.name), reverse=True)
    complete = [a for a in items if a.complete]
    keep: list[ArchiveInfo] = []
    remove: list[ArchiveInfo] = []
    for rank, info in enumerate(complete):
        if rank == 0 or (keep_last is None and keep_newer_than is None):
            keep.append(info)
        elif (keep_last is not None and rank < keep_last) or (
            keep_newer_than is not None and now - info.started_at < keep_newer_than
        ):
            keep.append(info)
        else:
            remove.append(info)
    limit = incomplete_older_than or keep_newer_than or timedelta(days=1)
    incomplete = [a for a in items if not a.complete]
    stale = tuple(a for a in incomplete if now - a.started_at >= limit)
    recent = tuple(a for a in incomplete if now - a.started_at < limit)
    return RetentionPlan(keep=tuple(keep), remove=tuple(remove), stale_incomplete=stale,
                         recent_incomplete=recent)


def human_bytes(count: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"  # pragma: no cover
