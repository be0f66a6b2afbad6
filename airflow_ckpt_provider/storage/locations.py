"""How a location URL becomes an fsspec filesystem: ``hdfs://`` through WebHDFS, the rest by fsspec.

A user names an HDFS location the way Spark does, ``hdfs://<namenode>:<rpc port>/path``. Spark
uses it as it is; the provider opens the same path through WebHDFS (the NameNode's HTTP
interface, fsspec's ``webhdfs``), which needs no Hadoop client. :func:`open_location` is the one
place that decides this; the storage hook adds what an Airflow connection says. Building a
filesystem contacts nothing: a wrong host or port shows on the first read.
"""

from __future__ import annotations

import getpass
import os
import posixpath
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import fsspec

from airflow_ckpt_provider.checkpoint.errors import CheckpointNotEmpty, FileSinkHazard, SharedCheckpoint
from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.records.control import CONTROL_DIR
from airflow_ckpt_provider.storage.listing import list_names

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

#: Hadoop 3's default NameNode HTTP port (``dfs.namenode.http-address``), where WebHDFS answers.
WEBHDFS_DEFAULT_PORT = 9870
#: The archive copies with up to 16 threads; requests keeps 10 connections per host by default.
WEBHDFS_CONNECTIONS = 32


def hdfs_over_webhdfs(uri: str, options: Mapping[str, Any],
                      default_user: str | None = None) -> tuple[str, dict[str, Any]]:
    """(path, fsspec ``webhdfs`` options) for an ``hdfs://host[:rpc port]/path`` URI; pure.

    ``options`` may hold ``host`` (overrides the URI's), ``port`` or ``webhdfs_port`` (the
    NameNode HTTP port; default :data:`WEBHDFS_DEFAULT_PORT`), ``user`` (else ``default_user``)
    and any other ``webhdfs`` option. Raises ``ValueError`` for a URI without a host.
    """
    parts = urlsplit(uri)
    opts = dict(options)
    host = opts.pop("host", None) or parts.hostname
    if not host:
        raise ValueError(f"{uri!r} names no NameNode host; write hdfs://<namenode>:<port>/path")
    http_port = opts.pop("webhdfs_port", None) or opts.pop("port", None) or WEBHDFS_DEFAULT_PORT
    if not opts.get("user") and default_user:
        opts["user"] = default_user
    return parts.path or "/", {**opts, "host": host, "port": int(http_port)}


def hadoop_user() -> str:
    """The user Hadoop's own clients act as: ``HADOOP_USER_NAME``, else the process's user."""
    return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def webhdfs_filesystem(options: Mapping[str, Any]) -> AbstractFileSystem:
    """fsspec's ``webhdfs`` client, its connection pool as large as the archive's parallel copies."""
    from requests.adapters import HTTPAdapter

    fs = fsspec.filesystem("webhdfs", **options)
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=WEBHDFS_CONNECTIONS)
    for prefix in ("http://", "https://"):
        fs.session.mount(prefix, adapter)
    return fs


def open_location(uri: str, **options: Any) -> tuple[AbstractFileSystem, str]:
    """(filesystem, path) for ``uri`` with fsspec storage ``options``: ``hdfs://`` through WebHDFS
    (see :func:`hdfs_over_webhdfs`; the user defaults to :func:`hadoop_user`), anything else as
    ``fsspec.core.url_to_fs`` opens it. Raises :class:`CredentialsInLocation` for a URI with
    credentials (:func:`~airflow_ckpt_provider.checkpoint.locations.refuse_credentials`) and
    ``ValueError`` for an ``hdfs://`` URI without a host."""
    refuse_credentials(uri)
    if fsspec.utils.get_protocol(uri) == "hdfs":
        path, webhdfs = hdfs_over_webhdfs(uri, options, default_user=hadoop_user())
        return webhdfs_filesystem(webhdfs), path
    fs, path = fsspec.core.url_to_fs(uri, **options)
    return fs, path


def _protocols(fs: AbstractFileSystem) -> frozenset[str]:
    proto = fs.protocol
    return frozenset({proto} if isinstance(proto, str) else proto)


def resolved(fs: AbstractFileSystem, path: str) -> str:
    """Where ``path`` of ``fs`` really is, for overlap checks: on a local disk the absolute path with
    ``.`` / ``..`` and every symbolic link resolved (also below a part that does not exist yet);
    elsewhere the key prefix without the protocol, repeated or trailing slashes (object stores keep
    ``..`` in a key as it is, so it is not resolved there)."""
    from airflow_ckpt_provider.storage.files import is_local

    stripped = fs._strip_protocol(path)
    if is_local(fs):
        return os.path.realpath(os.path.abspath(stripped))
    return re.sub(r"/{2,}", "/", stripped).rstrip("/") or "/"


def overlap(first: tuple[AbstractFileSystem, str], second: tuple[AbstractFileSystem, str]) -> str | None:
    """How the location ``first`` relates to ``second`` once both are :func:`resolved`: "the same
    location", "inside" (first lies inside second), "contains" (second lies inside first), or None.
    Locations on filesystems of different protocols never overlap."""
    (fs_a, a), (fs_b, b) = first, second
    if not _protocols(fs_a) & _protocols(fs_b):
        return None
    a, b = resolved(fs_a, a), resolved(fs_b, b)
    if a == b:
        return "the same location"
    if a.startswith(b.rstrip("/") + "/"):
        return "inside"
    if b.startswith(a.rstrip("/") + "/"):
        return "contains"
    return None


def _location(fs: Any, path: str) -> tuple[str, str]:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    path = fs._strip_protocol(path).rstrip("/") or "/"
    if protocol in ("file", "local"):
        path = os.path.realpath(path)
    return protocol, path


def check_launch_target(
    target: tuple[Any, str],
    uri: str,
    *,
    old: tuple[Any, str] | None = None,
    sink: tuple[Any, str] | None = None,
    allow_existing_checkpoint: bool = False,
) -> bool:
    """Refuse an unsafe launch target; reads only, creates nothing. Each location is an fsspec
    ``(filesystem, path)``. Returns whether the checkpoint already holds something (only possible
    with ``allow_existing_checkpoint``).

    Raises :class:`SharedCheckpoint` when the new checkpoint is the old one and
    :class:`CheckpointNotEmpty` when it holds anything but the provider's control folder
    ``_ckpt/`` (left by a launch that failed before Spark wrote anything; the caller checks
    that nothing in it is alive) (both unless ``allow_existing_checkpoint``),
    :class:`FileSinkHazard` when ``sink`` has ``_spark_metadata`` (unless the query restarts on its
    own, non-empty checkpoint, whose batch ids continue).
    """
    fs, path = target
    if old is not None and _location(*old) == _location(fs, path) and not allow_existing_checkpoint:
        raise SharedCheckpoint(found=f"{uri} for both the old and the new query",
                               expected="a new checkpoint location for the new query", path=uri)
    fs.invalidate_cache(path)
    existing: list[str] = []
    if fs.exists(path):
        entries = list_names(fs, path) if fs.isdir(path) else [path]
        existing = [posixpath.basename(str(e).rstrip("/")) for e in entries]
        existing = [e for e in existing if e and e != CONTROL_DIR
                    and fs._strip_protocol(e).rstrip("/") != path.rstrip("/")]
    if existing and not allow_existing_checkpoint:
        raise CheckpointNotEmpty(found=f"{len(existing)} entries ({', '.join(sorted(existing)[:5])})",
                                 expected="an empty or missing location", path=uri)
    if sink is not None and not (existing and allow_existing_checkpoint):
        sink_fs, sink_path = sink
        metadata = posixpath.join(sink_path.rstrip("/"), "_spark_metadata")
        sink_fs.invalidate_cache(metadata)
        if sink_fs.exists(metadata):
            raise FileSinkHazard(found=f"{metadata} from an earlier query",
                                 expected="a file sink output path without _spark_metadata", path=sink_path)
    return bool(existing)
