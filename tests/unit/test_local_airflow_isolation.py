"""LocalAirflow(isolate_triggerer=True) refuses clearly, before starting anything, when the
triggerer cannot get its own PID namespace (real ``unshare``, really not permitted)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.harness.airflow_server import LocalAirflow, check_pid_namespaces
from tests.harness.errors import PidNamespaceUnavailable

UNSHARE = shutil.which("unshare")
SETPRIV = shutil.which("setpriv")


def test_refused_when_unshare_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    home = tmp_path / "airflow"
    with pytest.raises(PidNamespaceUnavailable, match="no `unshare` command on PATH") as refused:
        LocalAirflow(home, tmp_path, isolate_triggerer=True).start()
    assert "without isolate_triggerer" in refused.value.action
    assert not home.exists(), "nothing may be started or prepared before the refusal"


@pytest.mark.skipif(UNSHARE is None or SETPRIV is None or os.geteuid() != 0,
                    reason="needs root, unshare and setpriv to drop the capabilities for real")
def test_refused_when_namespaces_are_not_permitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "unshare"  # the real unshare, without the capabilities it needs
    wrapper.write_text(f'#!/bin/sh\nexec {SETPRIV} --inh-caps=-all --bounding-set=-all {UNSHARE} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    home = tmp_path / "airflow"
    with pytest.raises(PidNamespaceUnavailable, match="exit code 1") as refused:
        LocalAirflow(home, tmp_path, isolate_triggerer=True).start()
    assert "Operation not permitted" in refused.value.detail
    assert "CAP_SYS_ADMIN" in refused.value.action
    assert not home.exists()


@pytest.mark.skipif(UNSHARE is None or os.geteuid() != 0, reason="needs root and unshare")
def test_the_probe_runs_a_process_as_pid_1() -> None:
    assert check_pid_namespaces() == UNSHARE
