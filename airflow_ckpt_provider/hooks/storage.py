"""Airflow hook that opens checkpoint and archive locations as fsspec filesystems.

Without a connection id the URI's own scheme decides (local paths, ``file://``,
``memory://``, or any fsspec protocol with ambient credentials). With one, the filesystem
comes from Airflow's object storage registry (``airflow.sdk.io.attach``), so ``s3://``,
``gs://`` and ``abfs://`` use the credentials of that Airflow connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import fsspec
from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem


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
        """The filesystem holding ``uri`` and the path inside it."""
        if self.storage_conn_id:
            from airflow.sdk.io import attach

            protocol = fsspec.utils.get_protocol(uri)
            fs = attach(protocol, self.storage_conn_id).fs
            return fs, fs._strip_protocol(uri)
        fs, path = fsspec.core.url_to_fs(uri, **self.storage_options)
        return fs, path
