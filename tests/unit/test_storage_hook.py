"""CheckpointStorageHook on S3 without the amazon provider: s3fs built from an Airflow ``aws``
connection (keys, endpoint, region), and no secret in what the hook logs."""

from __future__ import annotations

import logging

import pytest

from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook, s3_options


def test_s3_options_from_an_aws_connection() -> None:
    options = s3_options("AKIA1", "s3cr3t", {"endpoint_url": "http://127.0.0.1:9000", "region_name": "us-east-1",
                                            "aws_session_token": "tok"}, {"default_block_size": 1024})
    assert options == {"key": "AKIA1", "secret": "s3cr3t", "token": "tok", "default_block_size": 1024,
                       "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "us-east-1"}}
    assert s3_options(None, None, {"aws_access_key_id": "A", "aws_secret_access_key": "S"}) == {"key": "A", "secret": "S"}
    assert s3_options(None, None, {}) == {}, "no keys: s3fs's own credential chain"


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_the_hook_builds_s3fs_from_the_connection_and_logs_no_secret(
        scheme: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_S3",
                       "aws://AKIAKEY:TopS3cret@/?endpoint_url=http%3A%2F%2F127.0.0.1%3A9&region_name=us-east-1")
    with caplog.at_level(logging.DEBUG):
        fs, path = CheckpointStorageHook(storage_conn_id="ckpt_s3").filesystem(f"{scheme}://bucket/cp")
    assert type(fs).__name__ == "S3FileSystem" and path == "bucket/cp"
    assert fs.key == "AKIAKEY" and fs.secret == "TopS3cret"
    assert fs.client_kwargs == {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"}
    out = capsys.readouterr()
    logged = caplog.text + out.out + out.err  # Airflow's task logging writes to stdout
    assert "ckpt_s3" in logged and "TopS3cret" not in logged
