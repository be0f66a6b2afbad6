"""The local broker's log directory: a formatted one keeps its cluster id for the next start."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ckpt_provider.local.errors import BrokerStartFailed
from airflow_ckpt_provider.local.kafka import formatted_cluster_id


def test_an_unformatted_folder_has_no_cluster_id(tmp_path: Path) -> None:
    assert formatted_cluster_id(tmp_path / "data") is None
    assert formatted_cluster_id(tmp_path) is None


def test_a_formatted_folder_keeps_the_cluster_id_of_its_meta_properties(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Sun Dec 06 20:01:02 UTC 2026\nnode.id=1\ndirectory.id=abc\nversion=1\ncluster.id=-Zq3vXh1Qa2b\n")
    assert formatted_cluster_id(tmp_path) == "-Zq3vXh1Qa2b"


def test_a_meta_properties_without_a_cluster_id_is_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("node.id=1\nversion=1\n")
    with pytest.raises(BrokerStartFailed) as raised:
        formatted_cluster_id(tmp_path)
    assert "without a cluster.id" in str(raised.value) and "Move" in str(raised.value)
