"""Airflow hook that opens checkpoint and archive locations as fsspec filesystems.

Without a connection id the URI's own scheme decides (local paths, ``file://``,
``memory://``, or any fsspec protocol with ambient credentials). With one, the filesystem
comes from Airflow's object storage registry (``airflow.sdk.io.attach``), so ``s3://``,
``gs://`` and ``abfs://`` use the credentials of that Airflow connection. Schemes Airflow has
no object storage for (``hdfs://``, ``webhdfs://``) get a plain fsspec filesystem built from the
connection (extra as storage options, plus host, port and login as user); ``s3://`` and
``s3a://`` without the amazon provider get s3fs with the keys, endpoint and region of an Airflow
``aws`` connection (:func:`s3_options`). Neither the hook nor its errors log a secret.

``hdfs://<namenode>:<rpc port>/path`` — the name Spark uses — is read and written through WebHDFS
(fsspec ``webhdfs``, no Hadoop client needed): the NameNode host comes from the URI unless the
connection names one, the HTTP port from the connection's port, else the storage option
``webhdfs_port``, else Hadoop's default 9870; the user from the connection's login, the option
``user``, ``HADOOP_USER_NAME`` or the process's user (:mod:`~airflow_ckpt_provider.storage.locations`).
So one location name serves both Spark and the provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import fsspec
from airflow.sdk import BaseHook

from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.storage.locations import (
    hadoop_user,
    hdfs_over_webhdfs,
    open_location,
    webhdfs_filesystem,
)

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem


#: Keys of an Airflow ``aws`` connection's extra that s3fs takes inside ``client_kwargs``.
_S3_CLIENT_KEYS = ("endpoint_url", "region_name")


def s3_options(login: str | None, password: str | None, extra: Mapping[str, Any],
               storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """s3fs storage options from an Airflow ``aws`` connection: login and password (or the extra's
    ``aws_access_key_id``/``aws_secret_access_key``) as the keys, ``aws_session_token`` as the
    token, ``endpoint_url`` and ``region_name`` for the client; other extra keys are passed as
    they are; ``storage_options`` win. No key at all: s3fs's own chain (environment, profile,
    instance role). Pure; the secrets are only in the returned mapping."""
    extra = dict(extra)
    options: dict[str, Any] = {}
    key = extra.pop("aws_access_key_id", None) or login
    secret = extra.pop("aws_secret_access_key", None) or password
    token = extra.pop("aws_session_token", None)
    if key:
        options["key"] = key
    if secret:
        options["secret"] = secret
    if token:
        options["token"] = token
    client = dict(extra.pop("client_kwargs", None) or {})
    for name in _S3_CLIENT_KEYS:
        if extra.get(name):
            client[name] = extra.pop(name)
        else:
            extra.pop(name, None)
    if client:
        options["client_kwargs"] = client
    options.update(extra)
    options.update(storage_options or {})
    return options


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
        """The filesystem holding ``uri`` and the path inside it (``hdfs://``: over WebHDFS).
        :class:`CredentialsInLocation` for a URI with credentials in it (they belong in the connection)."""
        refuse_credentials(uri)
        if fsspec.utils.get_protocol(uri) == "hdfs":
            path, options = hdfs_over_webhdfs(uri, self._connection_options(), default_user=hadoop_user())
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
        return open_location(uri, **self.storage_options)

    def _fsspec_from_connection(self, protocol: str) -> AbstractFileSystem:
        """fsspec filesystem for ``protocol`` built from the connection: for ``s3``/``s3a``
        (without the amazon provider) :func:`s3_options`; else its extra as storage options, plus
        ``host``/``port``/``user`` when set (what fsspec's hdfs and webhdfs take)."""
        if protocol in ("s3", "s3a"):
            conn = self.get_connection(self.storage_conn_id)  # type: ignore[arg-type]
            self.log.info("using s3fs with the credentials of connection %s", self.storage_conn_id)
            return fsspec.filesystem("s3", **s3_options(conn.login, conn.password, conn.extra_dejson,
                                                        self.storage_options))
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
