"""Credentials never leave memory: a location with credentials in its URL is refused before
anything is read or written, and every location in an error line, the command line's output or
a log passes through one redaction function (:func:`redact_location`). Tests the promise of
docs/src/object-storage.md: "No secret is written to a log or an error message."."""

from __future__ import annotations

import io
import logging
import os
import time
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.errors import CorruptCheckpointFile, CredentialsInLocation
from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.checkpoint.secrets import REDACTED, location_credentials, redact_location
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.locations import open_location
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.upgrade.record import UpgradeIntent
from tests.unit.conftest import write_checkpoint

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzz"  # shaped like an AWS secret key: it holds a '/'
KEY = "AKIAIOSFODNN7EXAMPLE"
REPO = Path(__file__).resolve().parents[2]

CREDENTIALED = [
    f"s3a://{KEY}:{SECRET}@bucket/checkpoints/orders",
    f"s3://{KEY}:{SECRET}@bucket/cp",
    f"s3a://{KEY}@bucket/cp",  # the access key alone
    f"hdfs://etl:{SECRET}@namenode:8020/cp",
    f"webhdfs://etl:{SECRET}@namenode:9870/cp",
    f"http://etl:{SECRET}@files.example.com/cp",
    f"https://etl:{SECRET}@files.example.com/cp",
]
PLAIN = ["s3a://bucket/cp", "hdfs://etl@namenode:8020/cp", "/data/cp@2024", "s3a://bucket/key@with-at",
         "file:///tmp/cp", "memory://cp"]


def secrets_of(uri: str) -> list[str]:
    return [s for s in (SECRET, KEY) if s in uri]


@pytest.mark.parametrize("uri", CREDENTIALED)
def test_redaction_masks_the_whole_user_info(uri: str) -> None:
    masked = redact_location(uri)
    assert not any(s in masked for s in secrets_of(uri)) and f"://{REDACTED}@" in masked
    assert redact_location(masked) == masked
    assert redact_location(f"copy of {uri} failed; see {uri}") == f"copy of {masked} failed; see {masked}"
    assert location_credentials(uri) and not location_credentials(masked)


@pytest.mark.parametrize("uri", PLAIN)
def test_locations_without_credentials_pass(uri: str) -> None:
    assert not location_credentials(uri) and refuse_credentials(uri) == uri
    if "://" not in uri or "@" not in uri.split("://", 1)[1].split("/", 1)[0]:
        assert redact_location(uri) == uri


def test_redaction_is_linear_on_hostile_text() -> None:
    for text in ("s3a://k" * 500_000, "s3a://k:" + "s" * 3_000_000, "x" * 5_000_000 + "://a:b@c", "s3a://k@" * 300_000):
        started = time.process_time()
        redact_location(text)
        assert time.process_time() - started < 10, len(text)  # quadratic would be hours


@pytest.mark.parametrize("uri", CREDENTIALED)
def test_every_entry_point_refuses_credentials_before_touching_anything(uri: str, tmp_path: Path) -> None:
    calls = {
        "open_location": lambda: open_location(uri),
        "storage hook": lambda: CheckpointStorageHook().filesystem(uri),
        "reader": lambda: CheckpointReader(uri, fs=fsspec.filesystem("memory")),
        "archive": lambda: CheckpointArchive(fsspec.filesystem("file"), str(tmp_path / "a"), archive_uri=uri),
        "journal intent": lambda: UpgradeIntent(stream_name="orders", old_checkpoint=uri, new_checkpoint="/n"),
    }
    for name, call in calls.items():
        with pytest.raises(CredentialsInLocation) as info:
            call()
        text = str(info.value)
        assert not any(s in text for s in secrets_of(uri)), (name, text)
        assert "Airflow connection" in text and "environment" in text and redact_location(uri) in text, name
    assert not os.listdir(tmp_path)


def test_archiving_from_a_credentialed_source_writes_no_manifest_or_intent(tmp_path: Path) -> None:
    source = str(tmp_path / "cp")
    write_checkpoint(source)
    archive = CheckpointArchive(fsspec.filesystem("file"), str(tmp_path / "archive"))
    with pytest.raises(CredentialsInLocation):
        archive.archive(fsspec.filesystem("file"), source, stream_name="orders", upgrade_id="up-1",
                        source_uri=CREDENTIALED[0])
    assert not (tmp_path / "archive").exists()


def ckpt(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return cli.main(argv, stdout=out, stderr=err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("uri", CREDENTIALED[:1] + CREDENTIALED[3:4] + CREDENTIALED[5:6])
def test_no_command_prints_or_logs_the_secret(uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    local = str(tmp_path / "local")
    write_checkpoint(local)
    before = sorted(p for p in tmp_path.rglob("*"))
    commands = [
        ["inspect", uri], ["inspect", "--json", uri], ["offsets", uri], ["verify-archive", uri],
        ["archives", uri], ["journal", uri, "--name", "orders"], ["state", uri],
        ["archive", local, "--to", uri, "--name", "orders"], ["archive", uri, "--to", str(tmp_path / "a")],
        ["restore", uri, "--to", str(tmp_path / "r")], ["restore", local, "--to", uri],
        ["-v", "inspect", uri],
    ]
    for argv in commands:
        code, out, err = ckpt(argv)
        assert code == 2, (argv, code, out, err)
        assert out == "" and "Traceback" not in err and err.count("ckpt: error:") == 1, (argv, err)
        assert "credentials in a location" in err and "Airflow connection" in err, (argv, err)
        assert not any(s in out + err for s in secrets_of(uri)), (argv, err)
    assert not any(s in record.getMessage() for record in caplog.records for s in secrets_of(uri))
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written anywhere


def test_error_lines_mask_locations_whatever_the_error() -> None:
    error = CorruptCheckpointFile(found=f"a copy of {CREDENTIALED[0]} that failed", expected="e",
                                  path=CREDENTIALED[3] + "/offsets/7", line=2)
    text = str(error) + error.full_text()
    assert SECRET not in text and KEY not in text and "s3a://***@bucket" in text and "hdfs://***@namenode" in text
    code, out, err = ckpt(["inspect", "-o", "anon=true", f"nosuchscheme://u:{SECRET}@h/x"])
    assert code == 2 and SECRET not in out + err


def test_the_object_storage_page_makes_the_promise_this_module_tests() -> None:
    page = (REPO / "docs" / "src" / "object-storage.md").read_text()
    assert "No secret is written to a log or an error message." in page
    assert "test_location_secrets.py" in page


def test_a_report_never_shows_the_credentials_of_a_location() -> None:
    from airflow_ckpt_provider.checkpoint.report import UpgradeReport

    report = UpgradeReport(stream="orders", outcome="failed", old_checkpoint=CREDENTIALED[0],
                           new_checkpoint=CREDENTIALED[3], archive=CREDENTIALED[5],
                           notes=(f"preflight failed reading {CREDENTIALED[1]}",))
    for text in (report.to_json(), report.to_markdown(), report.to_html(), str(report.to_dict())):
        assert SECRET not in text and KEY not in text and "s3a://***@bucket/checkpoints/orders" in text
