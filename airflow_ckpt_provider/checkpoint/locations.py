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
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import fsspec

from airflow_ckpt_provider.checkpoint.errors import CredentialsInLocation
from airflow_ckpt_provider.checkpoint.secrets import location_credentials, redact_location

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


def refuse_credentials(uri: str, what: str = "location") -> str:
    """``uri`` itself when it carries no credentials; :class:`CredentialsInLocation` (naming the
    location masked) when its user-info holds a password or an object store's access key."""
    if location_credentials(uri):
        raise CredentialsInLocation(
            found=f"a {what} with credentials in its user-info: {redact_location(uri)}",
            expected=f"a {what} without user-info, such as s3a://bucket/path or hdfs://namenode:8020/path",
            path=redact_location(uri))
    return uri


def open_location(uri: str, **options: Any) -> tuple[AbstractFileSystem, str]:
    """(filesystem, path) for ``uri`` with fsspec storage ``options``: ``hdfs://`` through WebHDFS
    (see :func:`hdfs_over_webhdfs`; the user defaults to :func:`hadoop_user`), anything else as
    ``fsspec.core.url_to_fs`` opens it. Raises :class:`CredentialsInLocation` for a URI with
    credentials (:func:`refuse_credentials`) and ``ValueError`` for an ``hdfs://`` URI without a host."""
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
    from airflow_ckpt_provider.checkpoint.files import is_local

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
