"""The preflight's typed result: what the operator returns is what the DAG, the approval gate and
the report read back, through one strict codec."""

from __future__ import annotations

import json

import pytest

from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult
from airflow_ckpt_provider.upgrade.results import PreflightResult

FOUND = PreflightResult(summary_md="### Upgrade", handover={"batch_id": 7}, starting_offsets='{"t":{"0":5}}',
                        upgrade_id="u-1", journal="s3://b/a/orders/_upgrades/u-1.json", resuming=True,
                        steps_done=("graceful_stop",), state_export="s3://b/a/orders/_state/u-1",
                        rollback_checkpoint="s3://b/c/v2.rollback")


def test_round_trip_as_object_and_as_text() -> None:
    value = FOUND.to_dict()
    assert value["format"] == 1 and value["steps_done"] == ["graceful_stop"]
    assert PreflightResult.from_json(value) == FOUND
    assert PreflightResult.from_json(json.dumps(value)) == FOUND


@pytest.mark.parametrize(("change", "found"), [
    ({"resumingg": True}, "unknown key(s) 'resumingg'"),
    ({"format": 2}, "format 2 (written by a newer release"),
    ({"already_done": "yes"}, "'already_done' of JSON string"),
    ({"steps_done": ["a", 3]}, "'steps_done'"),
    ({"handover": None}, "'handover' of JSON null"),
])
def test_anything_else_is_refused_with_what_was_found(change: dict, found: str) -> None:
    with pytest.raises(InvalidStepResult) as caught:
        PreflightResult.from_json({**FOUND.to_dict(), **change})
    assert found in caught.value.found, caught.value.found


def test_a_result_without_a_format_number_is_refused() -> None:
    value = FOUND.to_dict()
    del value["format"]
    with pytest.raises(InvalidStepResult, match="without a format number"):
        PreflightResult.from_json(value)
