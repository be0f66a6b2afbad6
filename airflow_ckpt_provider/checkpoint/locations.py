"""What a location may hold before the provider reads, writes or records it. Pure: a check over
the location string, no I/O.

A location (checkpoint, archive root, sink, journal) is shown in logs, error lines and reports,
handed to Spark and written to the journal, so it must carry no credentials: they belong in a
connection. :func:`refuse_credentials` is the one check; it tells credentials apart with
:func:`~airflow_ckpt_provider.checkpoint.secrets.location_credentials` and names the location
masked (:func:`~airflow_ckpt_provider.checkpoint.secrets.redact_location`). Opening a location
through fsspec is the storage layer's (:mod:`airflow_ckpt_provider.storage.locations`).
"""

from __future__ import annotations

from airflow_ckpt_provider.checkpoint.errors import CredentialsInLocation
from airflow_ckpt_provider.checkpoint.secrets import location_credentials, redact_location


def refuse_credentials(uri: str, what: str = "location") -> str:
    """``uri`` itself when it carries no credentials; :class:`CredentialsInLocation` (naming the
    location masked) when its user-info holds a password or an object store's access key."""
    if location_credentials(uri):
        raise CredentialsInLocation(
            found=f"a {what} with credentials in its user-info: {redact_location(uri)}",
            expected=f"a {what} without user-info, such as s3a://bucket/path or hdfs://namenode:8020/path",
            path=redact_location(uri))
    return uri


__all__ = ["refuse_credentials"]
