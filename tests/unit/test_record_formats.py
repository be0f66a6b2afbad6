"""Records across releases: what the previous release wrote (literal texts below, kept as they were
written) still reads, what this release writes carries its format number, and a newer format is
refused with the record's own typed error. The journal, its parts, the control files the
provider and the driver exchange, and the provider's other files (the dev stack's state, the trial
driver's files, the state job's result, the archive's intent, the locks)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.errors import InvalidStopResult, JournalCorrupt, JournalOfAnotherRelease
from airflow_ckpt_provider.checkpoint.path import PathChoice
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, TypedError
from airflow_ckpt_provider.records.control import (
    CONTROL_FORMAT,
    Heartbeat,
    InvalidControlRecord,
    StopAck,
    StopRequest,
    parse_record,
)
from airflow_ckpt_provider.upgrade.record import FORMAT, JournalRecord

#: A journal as the previous release wrote it (format 2; its step results without format numbers).
OLD_JOURNAL = """{
  "closed_at": "",
  "created_at": "2026-11-21T19:40:00+00:00",
  "format": 2,
  "intent": {"archive_root": "/lake/archive", "new_application": "v2.py", "new_checkpoint": "/lake/ck/orders-v2",
             "old_application": "v1.py", "old_checkpoint": "/lake/ck/orders-v1", "stream_name": "orders"},
  "outcome": null,
  "phase": "upgrade",
  "planned_handover": {"batch_id": 41},
  "planning": {
    "upgrade_path": {"attempts": 1, "error": "", "finished_at": "2026-11-21T19:41:01+00:00", "name": "upgrade_path",
                     "notes": {}, "result": {"in_place": false, "mode": "auto", "path": "new checkpoint",
                                             "reason": "the check says so"},
                     "run_id": "manual__1", "started_at": "2026-11-21T19:41:00+00:00", "state": "done"}
  },
  "release": "0.9.0",
  "run_log": [{"run_id": "manual__1", "what": "started"}],
  "runs": ["manual__1"],
  "steps": {
    "archive": {"attempts": 2, "error": "", "finished_at": "", "name": "archive", "notes": {}, "result": null,
                "run_id": "manual__1", "started_at": "2026-11-21T19:47:01+00:00", "state": "started"},
    "graceful_stop": {
      "attempts": 1, "error": "", "finished_at": "2026-11-21T19:47:00+00:00", "name": "graceful_stop",
      "notes": {"request_id": "r1"},
      "result": {"ack": {"boundary_at": "2026-11-21T19:46:58.500+00:00", "last_committed_batch": 41,
                         "last_planned_batch": 41, "outcome": "CLEAN", "query_id": "q1", "request_id": "r1",
                         "run_id": "run1", "seen_at": "2026-11-21T19:46:57.000+00:00",
                         "stopped_at": "2026-11-21T19:46:59.100+00:00"},
                 "checkpoint_uri": "/lake/ck/orders-v1", "detail": null, "escalation": null,
                 "interrupted_batch": null, "last_committed_batch": 41, "last_planned_batch": 41,
                 "outcome": "graceful", "query_id": "q1", "request_id": "r1", "timeline": {"quiet check": 1.0},
                 "waited_s": 3.2},
      "run_id": "manual__1", "started_at": "2026-11-21T19:46:55+00:00", "state": "done"}
  },
  "upgrade_id": "up-0123456789ab"
}"""

#: Control files as drivers and providers of the previous release wrote them (no format number).
OLD_HEARTBEAT = ('{"app_id": "local-1", "boot_id": "b", "host": "h", "interval_s": 2.0, "pid": 42, '
                 '"pid_namespace": "pid:[1]", "query_id": "q1", "run_id": "run1", "started_at": '
                 '"2026-11-21T19:40:00+00:00", "state": "running", "updated_at": "2026-11-21T19:46:00+00:00"}')
OLD_REQUEST = ('{"expires_at": "", "reason": "upgrade", "request_id": "r1", "requested_at": '
               '"2026-11-21T19:46:55+00:00", "requested_by": "dag.graceful_stop"}')
#: an ack of a driver older still: without seen_at and boundary_at
OLDER_ACK = ('{"last_committed_batch": 41, "last_planned_batch": 41, "outcome": "clean", "query_id": "q1", '
             '"request_id": "r1", "run_id": "run1", "stopped_at": "2026-11-21T19:46:59+00:00"}')


def test_a_journal_of_the_previous_release_reads_with_its_step_results() -> None:
    record = JournalRecord.from_json(OLD_JOURNAL, path="/lake/archive/orders/up-0123456789ab.json")
    assert (record.format, record.release, record.runs, record.outcome) == (FORMAT, "0.9.0", ("manual__1",), None)
    assert record.intent.old_checkpoint == "/lake/ck/orders-v1" and record.planned_handover == {"batch_id": 41}
    stop = StopResult.from_json(record.steps["graceful_stop"].result)  # a result without a format number: format 0
    assert stop.last_committed_batch == 41 and stop.ack is not None and stop.ack["request_id"] == "r1"
    assert record.steps["graceful_stop"].notes == {"request_id": "r1"} and not record.steps["archive"].done
    assert PathChoice.from_json(record.planning["upgrade_path"].result).in_place is False
    again = JournalRecord.from_json(record.to_json())
    assert again == record and json.loads(record.to_json()) == json.loads(OLD_JOURNAL), "written back unchanged"


def test_what_this_release_writes_into_a_journal_carries_format_numbers() -> None:
    stop = StopResult.from_json(json.loads(OLD_JOURNAL)["steps"]["graceful_stop"]["result"])
    assert stop.to_dict()["format"] == 1 and StopResult.from_json(stop.to_dict()) == stop


def journal_with(**changes: Any) -> str:  # noqa: ANN401
    data = json.loads(OLD_JOURNAL)
    for key, value in changes.items():
        target, _, name = key.rpartition("__")
        holder = data
        for part in filter(None, target.split("__")):
            holder = holder[part]
        if value is ...:
            del holder[name]
        else:
            holder[name] = value
    return json.dumps(data)


@pytest.mark.parametrize(("case", "text", "error", "found"), [
    ("a newer journal", journal_with(format=3), JournalOfAnotherRelease, "journal format 3, written by release 0.9.0"),
    ("an older journal", journal_with(format=1), JournalOfAnotherRelease, "journal format 1"),
    ("no format number", journal_with(format=...), JournalCorrupt, "upgrade journal without a format number"),
    ("a format number in text", journal_with(format="2"), JournalCorrupt, "upgrade journal format '2'"),
    ("an unknown key", journal_with(surprise=1), JournalCorrupt, "unknown key(s) 'surprise'"),
    ("no intent", journal_with(intent=...), JournalCorrupt, "upgrade journal without 'intent'"),
    ("an intent without its stream", journal_with(intent__stream_name=...), JournalCorrupt,
     "journal intent without 'stream_name'"),
    ("a step without its state", journal_with(steps__archive__state=...), JournalCorrupt,
     "journal step without 'state'"),
    ("a step with an unknown key", journal_with(steps__archive__why="x"), JournalCorrupt, "'why'"),
    ("attempts in text", journal_with(steps__archive__attempts="2"), JournalCorrupt, "'attempts' of JSON string"),
    ("runs not a list", journal_with(runs="manual__1"), JournalCorrupt, "'runs' of JSON string"),
    ("not an object", "[]", JournalCorrupt, "upgrade journal JSON array"),
    ("not JSON", "{nope", JournalCorrupt, "not JSON"),
])
def test_a_journal_that_is_not_one_is_refused_with_a_typed_error(case: str, text: str, error: type[Exception],
                                                                 found: str) -> None:
    with pytest.raises(error) as refused:
        JournalRecord.from_json(text, path="/j.json")
    assert found in refused.value.found, refused.value.found  # type: ignore[attr-defined]
    assert refused.value.path == "/j.json"  # type: ignore[attr-defined]


def test_null_lists_and_maps_of_a_journal_read_as_empty_and_a_missing_release_as_none() -> None:
    record = JournalRecord.from_json(journal_with(runs=None, steps=None, planning=None, run_log=None, release=...))
    assert (record.runs, dict(record.steps), dict(record.planning), record.run_log, record.release) == \
        ((), {}, {}, (), "")


@pytest.mark.parametrize(("cls", "text"), [(Heartbeat, OLD_HEARTBEAT), (StopRequest, OLD_REQUEST), (StopAck, OLDER_ACK)])
def test_a_control_file_of_the_previous_release_reads_and_is_written_with_its_format(cls: Any, text: str) -> None:  # noqa: ANN401
    record = cls.from_json(text)
    written = json.loads(record.to_json())
    assert written.pop("format") == CONTROL_FORMAT and "format" not in json.loads(text)
    assert {k: v for k, v in written.items() if k in json.loads(text)} == json.loads(text)
    assert cls.from_json(record.to_json()) == record == cls.from_json(text.encode())


@pytest.mark.parametrize(("text", "found"), [
    (json.dumps({**json.loads(OLD_REQUEST), "format": 2}), "format 2 (written by a newer release"),
    (json.dumps({**json.loads(OLD_REQUEST), "format": 0}), "format 0"),
    (json.dumps({**json.loads(OLD_REQUEST), "format": "1"}), "format '1'"),
    (json.dumps({"requested_at": "2026-11-21T19:46:55+00:00"}), "without 'request_id'"),
    ("[]", "JSON array"),
    ("[" * 100 + "]" * 100, "nested more than"),
])
def test_a_control_file_that_is_not_one_is_refused_and_read_as_not_yet(text: str, found: str) -> None:
    with pytest.raises(InvalidControlRecord) as refused:
        StopRequest.from_json(text)
    assert found in refused.value.found and isinstance(refused.value, ValueError)
    assert parse_record(text.encode(), StopRequest, "stop request") is None


def test_a_key_a_newer_release_adds_to_a_control_file_is_ignored() -> None:
    assert StopRequest.from_json(json.dumps({**json.loads(OLD_REQUEST), "withdrawn": True})).request_id == "r1"


def test_unversioned_reads_only_when_the_codec_names_it() -> None:
    class Refused(TypedError):
        pass

    versioned = Codec("sample", Refused, {"a": Field((int,))})
    migrating = Codec("sample", Refused, {"a": Field((int,))}, versions=(UNVERSIONED,))
    assert migrating.decode('{"a": 1}') == migrating.decode('{"a": 1, "format": 1}') == {"a": 1}
    with pytest.raises(Refused, match="without a format number"):
        versioned.decode('{"a": 1}')
    with pytest.raises(Refused, match="format 0"):
        migrating.decode('{"a": 1, "format": 0}')
    with pytest.raises(ValueError, match="format numbers start at 1"):
        Codec("sample", Refused, {}, version=UNVERSIONED)
    assert migrating.encode({"a": 1}) == {"format": 1, "a": 1}


def test_the_provider_errors_are_the_codec_typed_errors() -> None:
    """A nested value's refusal is recognised by the codec through the base it shares."""
    assert issubclass(InvalidStopResult, TypedError) and issubclass(JournalCorrupt, TypedError)


# -- the provider's own files, given format 1 (what the previous release wrote: no format number) ---------

#: Each file as the previous release wrote it, with its record type and its typed error.
OLD_FILES: dict[str, tuple[str, str]] = {
    "dev-stack.json": ("airflow_ckpt_provider.cli.dev_stack:DevStack",
                       '{\n  "pid": 4242,\n  "port": 41234,\n  "controller_port": 41235,\n  "data_dir": "/w/kafka/data",\n'
                       '  "log_file": "/w/kafka/kafka.log"\n}\n'),
    "_ckpt/trial.json": ("airflow_ckpt_provider.checkpoint.compat:TrialRecord",
                         '{"batches": 2, "contract": true, "error": "", "operators": [{"detail": "customer", '
                         '"name": "StateStoreSaveExec", "operator_id": 0}], "outputs": {"output": "/lake/orders"}}'),
    "_ckpt/stateful-operators.json": ("airflow_ckpt_provider.checkpoint.compat:StatefulOperators",
                                      '[{"detail": "customer", "name": "StateStoreSaveExec", "operator_id": 0}]'),
    "_job/result.json": ("airflow_ckpt_provider.checkpoint.state:StateJobResult",
                         '{"batch_id": 7, "checkpoint": "/ck/orders", "listed_only": false, "spark_version": "4.0.1", '
                         '"stores": [{"checksum": "12", "key_schema": {"fields": [], "type": "struct"}, '
                         '"max_batch_id": 7, "min_batch_id": 0, "num_partitions": 4, "operator_id": 0, '
                         '"operator_name": "stateStoreSave", "path": "state/0/default", "renamed_fields": {}, '
                         '"rows": 3, "state_variable": null, "store_name": "default", '
                         '"value_schema": {"fields": [], "type": "struct"}, "void_fields": []}]}'),
    "_intent.json": ("airflow_ckpt_provider.checkpoint.manifest:ArchiveIntent",
                     '{"created_by": "airflow", "dag_run_id": "manual__1", "reason": "upgrade", '
                     '"source_uri": "/lake/ck/orders-v1", "started_at": "2026-11-21T19:47:01+00:00", '
                     '"stream_name": "orders", "upgrade_id": "up-0123456789ab"}'),
    "_upgrades/LOCK.json": ("airflow_ckpt_provider.storage.journal:StreamLock",
                            '{"upgrade_id": "up-0123456789ab", "run_id": "manual__1", '
                            '"acquired_at": "2026-11-21T19:40:00+00:00", "pid": 4242}'),
    ".target.restore-lock": ("airflow_ckpt_provider.storage.restore:RestoreLock",
                             '{"pid": 4242, "host": "worker-1", "started_at": "2026-11-21T19:50:00+00:00", '
                             '"archive": "/lake/archive/orders/20261121T194700Z-up-0123456789ab", '
                             '"temp": "/lake/ck/.target.restoring-0123456789ab"}'),
}


def _record_type(name: str) -> Any:  # noqa: ANN401 - a record class
    import importlib

    module, _, cls = OLD_FILES[name][0].partition(":")
    return getattr(importlib.import_module(module), cls)


def _as_written(text: str) -> Any:  # noqa: ANN401 - the JSON of a file, the bare array as its record holds it
    value = json.loads(text)
    return {"operators": value} if isinstance(value, list) else value


@pytest.mark.parametrize("name", OLD_FILES)
def test_a_file_of_the_previous_release_reads_and_is_written_back_with_format_1(name: str) -> None:
    cls, text = _record_type(name), OLD_FILES[name][1]
    record = cls.from_json(text)
    written = json.loads(record.to_json())
    assert written.pop("format") == 1
    assert written == _as_written(text), "the same keys and values, and the format number"
    assert cls.from_json(record.to_json()) == record == cls.from_json(text.encode())


@pytest.mark.parametrize("name", OLD_FILES)
def test_a_newer_or_damaged_file_is_refused_with_the_records_typed_error(name: str) -> None:
    cls, text = _record_type(name), OLD_FILES[name][1]
    newer = json.dumps({**_as_written(text), "format": 2})
    for bad, found in ((newer, "format 2 (written by a newer release: upgrade the provider)"),
                       (text[: len(text) // 2], "not JSON"), ('"text"', "JSON string")):
        with pytest.raises(TypedError) as refused:
            cls.from_json(bad)
        assert found in refused.value.found and refused.value.expected and refused.value.action, refused.value
