"""``hdfs://`` locations open through WebHDFS: one name for Spark (RPC port) and the provider (HTTP port)."""

from __future__ import annotations

import pytest
from fsspec.implementations.webhdfs import WebHDFS

from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.storage.locations import WEBHDFS_DEFAULT_PORT, hdfs_over_webhdfs, open_location
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.harness.hdfs import LocalHdfs, site_xml


@pytest.mark.parametrize(
    ("uri", "options", "path", "expected"),
    [
        ("hdfs://nn1:8020/ck/q1", {}, "/ck/q1", {"host": "nn1", "port": WEBHDFS_DEFAULT_PORT}),
        ("hdfs://nn1:8020/ck/q1", {"webhdfs_port": 50070, "user": "etl"}, "/ck/q1",
         {"host": "nn1", "port": 50070, "user": "etl"}),
        ("hdfs://nn1/ck", {"port": "9871", "use_https": True}, "/ck", {"host": "nn1", "port": 9871, "use_https": True}),
        ("hdfs://nn1:8020/ck", {"host": "gateway.example", "port": 14000}, "/ck",
         {"host": "gateway.example", "port": 14000}),  # HttpFS gateway in front of the NameNode
        ("hdfs://nn1:8020", {}, "/", {"host": "nn1", "port": WEBHDFS_DEFAULT_PORT}),
    ],
)
def test_hdfs_uri_maps_to_webhdfs_options(uri: str, options: dict[str, object], path: str,
                                          expected: dict[str, object]) -> None:
    assert hdfs_over_webhdfs(uri, options) == (path, expected)


def test_user_defaults_only_when_none_is_given() -> None:
    assert hdfs_over_webhdfs("hdfs://nn/ck", {}, default_user="airflow")[1]["user"] == "airflow"
    assert hdfs_over_webhdfs("hdfs://nn/ck", {"user": "etl"}, default_user="airflow")[1]["user"] == "etl"


def test_hdfs_uri_without_a_host_is_refused() -> None:
    with pytest.raises(ValueError, match="names no NameNode host"):
        hdfs_over_webhdfs("hdfs:///ck/q1", {})


def test_hook_opens_hdfs_through_webhdfs_without_contacting_it() -> None:
    fs, path = CheckpointStorageHook(webhdfs_port=50070, user="etl").filesystem("hdfs://127.0.0.1:8020/ck/q1")
    assert isinstance(fs, WebHDFS) and path == "/ck/q1"
    assert fs.url == "http://127.0.0.1:50070/webhdfs/v1" and fs.pars.get("user.name") == "etl"
    assert fs.session.get_adapter(fs.url)._pool_maxsize >= 16  # the archive's parallel copies


def test_every_reader_takes_the_same_hdfs_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HADOOP_USER_NAME", "spark")
    fs, path = open_location("hdfs://nn1:8020/ck/q1")  # the CLI and the core open it this way
    assert isinstance(fs, WebHDFS) and path == "/ck/q1"
    assert fs.url == f"http://nn1:{WEBHDFS_DEFAULT_PORT}/webhdfs/v1" and fs.pars.get("user.name") == "spark"
    reader = CheckpointReader("hdfs://nn1:8020/ck/q1", storage_options={"webhdfs_port": 50070})
    assert isinstance(reader.fs, WebHDFS) and reader.root == "/ck/q1" and reader.fs.url.startswith("http://nn1:50070/")
    local, where = open_location("/tmp/ck")
    assert where == "/tmp/ck" and "file" in local.protocol


def test_local_hdfs_configuration_names_every_address_on_loopback(tmp_path) -> None:  # noqa: ANN001
    cluster = LocalHdfs(tmp_path, rpc_port=18020, http_port=19870, hdfs_config={"dfs.blocksize": "1048576"})
    cluster.datanode_ports = {"data": 19866, "http": 19864, "ipc": 19867}
    site = cluster.hdfs_site()
    assert site["dfs.namenode.rpc-address"] == "127.0.0.1:18020"
    assert site["dfs.namenode.http-address"] == "127.0.0.1:19870"
    assert site["dfs.webhdfs.enabled"] == "true" and site["dfs.blocksize"] == "1048576"
    assert all(site[k].startswith("127.0.0.1:") for k in site if k.endswith(("address", "-address")))
    assert cluster.url == "hdfs://127.0.0.1:18020" and cluster.webhdfs_url == "webhdfs://127.0.0.1:19870"
    xml = site_xml({"a&b": "<x>"})
    assert "<name>a&amp;b</name><value>&lt;x&gt;</value>" in xml
