"""Bounded parsing: every JSON the provider reads has a size and depth limit, exceeding one is a
typed error (never a RecursionError traceback), and no error line is longer than a few KB."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_ckpt_provider import cli, json_limits
from airflow_ckpt_provider.checkpoint.compat import CompatibilityVerdict, TrialResult
from airflow_ckpt_provider.checkpoint.errors import (
    MAX_DETAIL_CHARS,
    CheckpointError,
    CorruptCheckpointFile,
    JsonTooLarge,
    ProviderError,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.jsonin import load_json
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.logs import (
    parse_commit_log,
    parse_initial_source,
    parse_metadata,
    parse_offset_log,
)
from airflow_ckpt_provider.checkpoint.manifest import ArchiveManifest
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceOffsets
from airflow_ckpt_provider.checkpoint.path import PathChoice
from airflow_ckpt_provider.checkpoint.state import StateExport, StateManifest
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.checkpoint.verify import VerifyResult
from airflow_ckpt_provider.records.control import Heartbeat
from airflow_ckpt_provider.upgrade.record import JournalRecord
from tests.unit.conftest import write_checkpoint

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_depth_is_counted_without_recursion_and_strings_do_not_count() -> None:
    assert json_limits.json_limit_problem(nested(json_limits.MAX_JSON_DEPTH)) is None
    assert "more than 64 levels" in str(json_limits.json_limit_problem(nested(65)))
    assert json_limits.json_limit_problem('["' + "[" * 1000 + '"]') is None  # brackets in a string
    assert json_limits.json_limit_problem('["\\"' + "{" * 1000 + '"]') is None  # after an escaped quote
    assert json_limits.json_limit_problem("[1]," * 10_000) is None  # many, not deep
    assert "line 3" in str(json_limits.json_limit_problem("\n\n" + nested(70)))
    assert "more than the 10 accepted" in str(json_limits.json_limit_problem(b"[1,2,3,4,5]", max_bytes=10))


def test_load_json_raises_the_typed_error() -> None:
    assert load_json(nested(64)) == load_json(nested(64))
    for text in (DEEP, DEEP_OBJECT, DEEP.encode()):
        with pytest.raises(JsonTooLarge) as info:
            load_json(text, what="manifest.json", path="/a/manifest.json")
        error = info.value
        assert isinstance(error, CheckpointError) and isinstance(error, ValueError)
        assert "manifest.json: JSON nested more than 64 levels deep" in str(error) and len(str(error)) < 600
    with pytest.raises(JsonTooLarge, match="more than the 5 accepted"):
        load_json("[1, 2, 3]", max_bytes=5)
    with pytest.raises(ValueError, match="duplicate key"):
        load_json('{"a":1,"a":2}', strict=True)


#: every parser of a file or message the provider reads, fed a 100,000-level document
PARSERS: dict[str, Callable[[str], object]] = {
    "kafka offsets": KafkaOffsets.from_json,
    "source offsets": lambda text: SourceOffsets.parse(0, text),
    "handover": Handover.from_json,
    "handover result": HandoverResult.from_json,
    "manifest": ArchiveManifest.from_json,
    "journal": lambda text: JournalRecord.from_json(text, path="/a/s/_upgrades/u.json"),
    "launch handle": LaunchHandle.from_json,
    "stop result": StopResult.from_json,
    "verify result": VerifyResult.from_json,
    "path choice": PathChoice.from_json,
    "state manifest": StateManifest.from_json,
    "state export": StateExport.from_json,
    "trial result": TrialResult.from_json,
    "verdict": CompatibilityVerdict.from_json,
    "offsets/N line 2": lambda text: parse_offset_log(f"v1\n{text}\n{{}}", "/ck/offsets/3"),
    "offsets/N line 3": lambda text: parse_offset_log(f'v1\n{{}}\n{text}', "/ck/offsets/3"),
    "commits/N": lambda text: parse_commit_log(f"v1\n{text}", "/ck/commits/3"),
    "metadata": lambda text: parse_metadata(text, "/ck/metadata"),
    "sources/0/0": lambda text: parse_initial_source(b"\x00v1\n" + text.encode(), "/ck/sources/0/0", 0),
}


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("text", [DEEP, DEEP_OBJECT], ids=["array", "object"])
def test_every_parser_refuses_deep_json_with_a_typed_short_error(name: str, text: str) -> None:
    if name == "state export" and text == DEEP:
        pytest.skip("StateExport.from_json reads text that does not start with '{' as a location")
    with pytest.raises(CheckpointError) as info:
        PARSERS[name](text)
    message = str(info.value)
    assert len(message) < 1500, message
    assert "nested more than 64 levels" in message, message


@pytest.mark.parametrize("name", ["offsets/N line 2", "offsets/N line 3", "commits/N", "metadata", "sources/0/0"])
def test_checkpoint_files_name_the_file_and_line(name: str) -> None:
    with pytest.raises(JsonTooLarge) as info:
        PARSERS[name](DEEP)
    assert isinstance(info.value, CorruptCheckpointFile)
    assert info.value.path and info.value.path.startswith("/ck/")


def test_the_driver_side_control_files_refuse_deep_json_as_value_error() -> None:
    with pytest.raises(ValueError, match="Heartbeat control file: JSON nested more than 64"):
        Heartbeat.from_json(DEEP)


def test_a_huge_error_field_is_cut_and_logged_in_full(caplog: pytest.LogCaptureFixture) -> None:
    huge = "x" * 100_000_000  # one error line was 100 MB long
    with caplog.at_level(logging.DEBUG, logger="airflow_ckpt_provider.checkpoint.errors"):
        error = CorruptCheckpointFile(found=f"start {huge} end", expected="short", path="/ck/offsets/1", line=2)
    text = str(error)
    assert len(text) < 3000 and text.startswith("corrupt checkpoint file (/ck/offsets/1, line 2): found start")
    assert "end; expected short" in text and "100,000,000 characters cut" not in text  # the cut is counted exactly
    assert f"[{len(huge) + 10 - 1000:,} characters cut]" in text
    assert error.found.endswith(" end") and len(error.full_text()) > 100_000_000
    assert any(len(r.getMessage()) > 100_000_000 for r in caplog.records)
    detail = ProviderError(found="f", expected="e", detail="line\n" * 100_000 + "the last line")
    assert str(detail).endswith("the last line") and len(str(detail)) < MAX_DETAIL_CHARS + 2000


def test_cli_refuses_deep_metadata_in_one_short_line(tmp_path: Path) -> None:
    location = str(tmp_path / "ck")
    write_checkpoint(location)
    (tmp_path / "ck" / "metadata").write_text(DEEP_OBJECT)
    for command in ("inspect", "offsets"):
        out, err = io.StringIO(), io.StringIO()
        assert cli.main([command, location], stdout=out, stderr=err) == 2
        assert out.getvalue() == "" and err.getvalue().count("\n") == 1 and len(err.getvalue()) < 1000
        assert f"{location}/metadata" in err.getvalue() and "nested more than 64 levels" in err.getvalue()


def test_a_huge_local_file_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from airflow_ckpt_provider.storage import files

    location = str(tmp_path / "ck")
    write_checkpoint(location)
    huge = tmp_path / "ck" / "offsets" / "2"
    with open(huge, "r+b") as handle:
        handle.truncate(json_limits.MAX_JSON_BYTES + 1)  # sparse: no disk, no memory
    reads: list[int] = []
    real_read = os.read
    monkeypatch.setattr(files.os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["offsets", location], stdout=out, stderr=err) == 2
    assert f"{location}/offsets/2" in err.getvalue() and "268,435,457 bytes" in err.getvalue()
    assert sum(reads) < 10 * 1024 * 1024  # the small files only
