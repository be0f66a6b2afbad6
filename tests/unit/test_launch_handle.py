"""LaunchHandle round-trips and refuses handles its mode cannot act on."""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.checkpoint import InvalidLaunchHandle, LaunchHandle, LaunchMode

BASE = {"checkpoint_uri": "/cp", "app_name": "job", "started_at": "2026-11-21T00:00:00+00:00"}


@pytest.mark.parametrize(
    "ids",
    [
        {"mode": "local", "pid": 4242, "log_path": "/logs/driver.log"},
        {"mode": "standalone-cluster", "driver_id": "driver-2026-0001", "master": "spark://h:7077",
         "ui_url": "http://h:8080"},
        {"mode": "yarn-cluster", "application_id": "application_1_0001"},
    ],
)
def test_round_trip(ids: dict) -> None:
    handle = LaunchHandle(**BASE, **ids)
    assert isinstance(handle.mode, LaunchMode)
    assert LaunchHandle.from_json(handle.to_json()) == handle
    assert LaunchHandle.from_json(handle.to_dict()) == handle


@pytest.mark.parametrize(
    ("ids", "missing"),
    [
        ({"mode": "local"}, "pid"),
        ({"mode": "standalone-cluster", "driver_id": "d"}, "master"),
        ({"mode": "yarn-cluster"}, "application_id"),
    ],
)
def test_missing_ids_are_refused(ids: dict, missing: str) -> None:
    with pytest.raises(InvalidLaunchHandle, match=missing):
        LaunchHandle(**BASE, **ids)


@pytest.mark.parametrize("data", ["not json", '{"mode": "local", "pid": 1, "surprise": 1}', '{"mode": "mesos"}'])
def test_bad_json_is_a_typed_error(data: str) -> None:
    with pytest.raises(InvalidLaunchHandle):
        LaunchHandle.from_json(data)
