"""Airflow hook that opens checkpoint and archive locations as fsspec filesystems.

Without a connection id the URI's own scheme decides (local paths, ``file://``,
``memory://``, or any fsspec protocol with ambient credentials). With one, the filesystem
comes from Airflow's object storage registry (``airflow.sdk.io.attach``), so ``s3://``,
``gs://`` and ``abfs://`` use the credentials of that Airflow connection. Schemes Airflow has
no object storage for (``hdfs://``, ``webhdfs://``) get a plain fsspec filesystem built from the
connection (extra as storage options, plus host, port and login as user).

``hdfs://<namenode>:<rpc port>/path`` — the name Spark uses — is read and written through WebHDFS
(fsspec ``webhdfs``, no Hadoop client needed): the NameNode host comes from the URI unless the
connection names one, the HTTP port from the connection's port, else the storage option
``webhdfs_port``, else Hadoop's default 9870; the user from the connection's login, the option
``user``, ``HADOOP_USER_NAME`` or the process's user. So one location name serves both Spark and
the provider.
"""

from __future__ import annotations

import getpass
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import fsspec
from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

#: Hadoop 3's default NameNode HTTP port (``dfs.namenode.http-address``), where WebHDFS answers.
WEBHDFS_DEFAULT_PORT = 9870


def hdfs_over_webhdfs(uri: str, options: dict[str, Any], default_user: str | None = None) -> tuple[str, dict[str, Any]]:
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


def webhdfs_filesystem(options: dict[str, Any]) -> AbstractFileSystem:
    """fsspec's ``webhdfs`` client with room for the archive's parallel copies: requests keeps 10
    connections per host by default, the archive copies with up to 16 threads."""
    from requests.adapters import HTTPAdapter

    fs = fsspec.filesystem("webhdfs", **options)
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=32)
    for prefix in ("http://", "https://"):
        fs.session.mount(prefix, adapter)
    return fs


class CheckpointStorageHook(BaseHook):
    """Resolves a checkpoint URI to ``(filesystem, path)``; holds no client of its own."""

    conn_name_attr = "storage_conn_id"
    default_conn_name = None
    hook_name = "Checkpoint storage"

    def __init__(self, storage_conn_id: str | None = None, **storage_options: Any) -> None:
        super().__init__()
        self.storage_conn_id = storage_conn_id or None
        self.storage_options = storage_options

    def filesystem(self, uri: str) -> tuple[AbstractFileSystem, str]:
        """The filesystem holding ``uri`` and the path inside it (``hdfs://``: over WebHDFS)."""
        if fsspec.utils.get_protocol(uri) == "hdfs":
            # as Hadoop's own clients: HADOOP_USER_NAME, else the user this process runs as
            user = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
            path, options = hdfs_over_webhdfs(uri, self._connection_options(), default_user=user)
            self.log.debug("opening %s through WebHDFS at %s:%s", uri, options["host"], options["port"])
            return webhdfs_filesystem(options), path
        if self.storage_conn_id:
            from airflow.sdk.io import attach

            protocol = fsspec.utils.get_protocol(uri)
            try:
                fs = attach(protocol, self.storage_conn_id).fs
            except ValueError:  # Airflow registers no filesystem for this scheme (hdfs, webhdfs, ...)
                fs = self._fsspec_from_connection(protocol)
            return fs, fs._strip_protocol(uri)
        fs, path = fsspec.core.url_to_fs(uri, **self.storage_options)
        return fs, path

    def _fsspec_from_connection(self, protocol: str) -> AbstractFileSystem:
        """fsspec filesystem for ``protocol`` built from the connection: its extra as storage
        options, plus ``host``/``port``/``user`` when set (what fsspec's hdfs and webhdfs take)."""
        options = self._connection_options()
        self.log.info("no Airflow object storage for %s://; using fsspec with connection %s",
                      protocol, self.storage_conn_id)
        return fsspec.filesystem(protocol, **options)

    def _connection_options(self) -> dict[str, Any]:
        """Storage options: the connection's extra, then the hook's own options, plus the
        connection's ``host``/``port``/``login`` (as ``user``) where not given."""
        if not self.storage_conn_id:
            return dict(self.storage_options)
        conn = self.get_connection(self.storage_conn_id)
        options: dict[str, Any] = {**conn.extra_dejson, **self.storage_options}
        for key, value in (("host", conn.host), ("port", conn.port), ("user", conn.login)):
            if value and key not in options:
                options[key] = value
        return options
