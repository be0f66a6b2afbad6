"""The provider's one error family: every class pickles with its fields and reads the same way
(the core's errors, the local stack's in ``local/errors.py``, and the test harness's few, which
join the local stack's branch)."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint import errors
from airflow_ckpt_provider.checkpoint.errors import CheckpointError, LaunchFailed, ProviderError
from airflow_ckpt_provider.local import errors as local_errors
from airflow_ckpt_provider.local.errors import LocalStackError
from tests.harness import errors as harness_errors

#: A sample value for every constructor field any error class takes; a new field needs one here.
SAMPLES: dict[str, Any] = {
    "found": "what was there",
    "expected": "what should be there",
    "action": "Do this.",
    "path": "/ck/offsets/7",
    "detail": "line one\nline two",
    "line": 3,
    "file": "offsets/7",
    "log_tail": "driver said goodbye",
    "topics": ("t",),
    "partitions": (("t", 1),),
    "details": (("t", 1, 5, 10),),
    "status": 503,
    "version": 3,
    "maximum": 2,
    "batch": 7,
}

ERROR_CLASSES = sorted(
    (c for module in (errors, local_errors, harness_errors) for c in vars(module).values()
     if isinstance(c, type) and issubclass(c, BaseException) and c.__module__ == module.__name__),
    key=lambda c: c.__name__,
)


def build(cls: type[ProviderError]) -> ProviderError:
    params = inspect.signature(cls).parameters
    return cls(**{name: SAMPLES[name] for name in params})


def test_the_module_has_one_family() -> None:
    assert len(ERROR_CLASSES) > 40
    assert all(issubclass(c, ProviderError) for c in ERROR_CLASSES)
    assert not issubclass(LocalStackError, CheckpointError) and not issubclass(CheckpointError, LocalStackError)
    assert issubclass(LocalStackError, RuntimeError)  # callers of the local stack may catch RuntimeError
    harness = [c for c in ERROR_CLASSES if c.__module__ == harness_errors.__name__]
    assert harness and all(issubclass(c, LocalStackError) for c in harness)


def test_no_two_classes_share_a_summary() -> None:
    summaries = [c.summary for c in ERROR_CLASSES]
    assert sorted(summaries) == sorted(set(summaries))


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_pickles_with_its_fields(cls: type[ProviderError]) -> None:
    error = build(cls)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert vars(copy) == vars(error)
    assert str(copy) == str(error)
    assert copy.args == error.args == (str(error),)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_reads_summary_where_found_expected_action(cls: type[ProviderError]) -> None:
    error = build(cls)
    text = str(error)
    assert text.startswith(cls.summary)
    assert f": found {SAMPLES['found']}; expected {SAMPLES['expected']}. {SAMPLES['action']}" in text
    params = inspect.signature(cls).parameters
    if "path" in params:
        assert text.startswith(f"{cls.summary} ({SAMPLES['path']}")
    if "detail" in params:
        assert text.endswith(f"{SAMPLES['action']}\n{SAMPLES['detail']}")
    default = cls(**{name: SAMPLES[name] for name in params if name != "action"})
    assert default.action == cls.default_action and default.action


def test_detail_and_log_tail_follow_the_line() -> None:
    error = LocalStackError(found="mvn exited 1", expected="exit 0", action="Read the output.", detail="BUILD FAILURE")
    assert str(error) == "local stack error: found mvn exited 1; expected exit 0. Read the output.\nBUILD FAILURE"
    assert str(LocalStackError(found="a", expected="b", action="C.")) == "local stack error: found a; expected b. C."
    failed = LaunchFailed(found="exit 1", expected="a running job", log_tail="Traceback ...")
    assert str(failed).endswith("launch again.\n--- driver log tail ---\nTraceback ...")
    assert failed.log_tail == "Traceback ..."
    assert "---" not in str(LaunchFailed(found="exit 1", expected="a running job"))
