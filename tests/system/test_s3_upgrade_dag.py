"""The reference DAG with both checkpoints, the archive and the journal on S3 (moto, fixture ``s3``).

Spark reads and writes the checkpoints through ``s3a://`` (the DAG's ``spark_conf`` param carries
the S3A settings and jars, Hadoop's default directory markers kept); the provider reaches the
same objects through s3fs with the credentials and endpoint from the environment. The producer
runs through the upgrade; every Kafka (partition, offset) is looked up in the sink (local
Parquet): lost == 0 and duplicated == 0.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.records.control import CONF_STANDBY_REHEARSAL
from airflow_ckpt_provider.storage.journal import list_journals
from airflow_ckpt_provider.storage.listing import list_batch_ids
from tests.harness.s3 import REGION
from tests.harness.upgrade_demo import UpgradeDemo, stop_jobs_under

pytestmark = pytest.mark.system


class S3UpgradeDemo(UpgradeDemo):
    """The demo stack with its checkpoints and archive root in an S3 bucket (the sink stays local)."""

    def __init__(self, work: Path, *, s3: Any, bucket: str, **kwargs: Any) -> None:  # noqa: ANN401
        super().__init__(work, **kwargs)
        self.s3 = s3
        self.old_cp = f"s3a://{bucket}/checkpoints/v1"  # type: ignore[assignment]
        self.new_cp = f"s3a://{bucket}/checkpoints/v2"  # type: ignore[assignment]
        self.archive_root = f"s3a://{bucket}/archive"  # type: ignore[assignment]

    def spark_conf(self, spark: Any = None) -> dict[str, str]:  # noqa: ANN401
        conf = super().spark_conf(spark)
        s3 = self.s3.spark_conf()
        conf["spark.jars"] = ",".join(j for j in (conf.get("spark.jars", ""), s3.pop("spark.jars")) if j)
        conf.update(s3)
        return conf

    def wait_for_batch(self, checkpoint: Any, batch_id: int, timeout: float, handle: Any = None) -> int:  # noqa: ANN401
        fs, root = fsspec.core.url_to_fs(str(checkpoint))
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            last = max(list_batch_ids(fs, f"{root}/commits"), default=None)
            if last is not None and last >= batch_id:
                return last
            time.sleep(0.5)
        raise TimeoutError(f"{checkpoint}: last committed batch {last} after {timeout:.0f} s, not yet {batch_id}")


@pytest.fixture
def s3_demo(kafka, s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3UpgradeDemo]:  # noqa: ANN001
    # the provider side (the DAG's tasks run in this process, the supervisors and ckpt as children)
    # finds the server through the environment, as s3fs/botocore read it
    for name, value in (("AWS_ACCESS_KEY_ID", s3.access_key), ("AWS_SECRET_ACCESS_KEY", s3.secret_key),
                        ("AWS_ENDPOINT_URL", s3.endpoint_url), ("AWS_DEFAULT_REGION", REGION)):
        monkeypatch.setenv(name, value)
    bucket = s3.create_bucket(f"upgrade-{uuid.uuid4().hex[:8]}")
    stack = S3UpgradeDemo(tmp_path / "demo", s3=s3, bucket=bucket, kafka=kafka, rate=80.0,
                          conf={CONF_STANDBY_REHEARSAL: "false"})  # no downtime measured: no rehearsal
    yield stack
    stack.close()
    stop_jobs_under(stack.work)


def test_the_reference_dag_on_s3_loses_and_duplicates_nothing(airflow_home, s3_demo: S3UpgradeDemo) -> None:  # noqa: ANN001
    demo = s3_demo
    v1 = demo.start()
    fs = demo.s3.filesystem()
    old = str(demo.old_cp).removeprefix("s3a://")
    assert {f"{old}/commits/", f"{old}/offsets/"} <= {k for k in fs.find(old) if k.endswith("/")}, \
        "Spark must have written S3A directory markers (the test would pass vacuously without them)"

    run = demo.upgrade_with_dag(v1, dag_id="stream_upgrade")
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    audit = demo.finish(demo.new_cp)

    assert audit.produced > 1000, "the producer must have run through the upgrade"
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
    assert audit.unexpected == 0

    archive = str(demo.archive_root).removeprefix("s3a://")
    fs.invalidate_cache()
    reports = [json.loads(fs.cat_file(k)) for k in fs.find(archive) if k.endswith("/upgrade-report.json")]
    assert reports and max(reports, key=lambda r: r.get("created_at", ""))["outcome"] == "upgraded"
    manifests = [k for k in fs.find(archive) if k.endswith("/manifest.json")]
    assert manifests, "the old checkpoint's archive is on S3"
    journals = list_journals(fs, archive, demo.stream)
    assert journals and all(j.closed and j.outcome == "upgraded" for j in journals), journals
