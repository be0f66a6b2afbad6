"""An S3-compatible server on 127.0.0.1 (moto in server mode) and the settings to reach it from
fsspec (s3fs), Airflow and Spark (Hadoop's S3A connector).

``LocalS3`` installs moto into a virtualenv of its own (``s3-server-requirements.txt``, pinned; a
stamp holding the file's hash makes a second install a no-op), so its boto3/botocore stay out
of the project's environment. It starts ``moto_server`` in its own process group, waits until
the server answers a real S3 request (ListBuckets), and stops it cleanly. moto honours
conditional writes (``If-None-Match: *`` answered with 412 and its ``Condition``), which the
upgrade journal's lock relies on. Spark reaches it through ``s3a://`` with the jars of the
``s3a`` JVM component (``make jvm``) and :meth:`LocalS3.spark_conf`.

Command line: ``python -m tests.harness.s3 install`` (the virtualenv only).
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.local import jvm
from airflow_ckpt_provider.local.errors import LocalStackError
from airflow_ckpt_provider.local.processes import (
    LOOPBACK,
    LocalServer,
    ensure_port_free,
    free_port,
    log_tail,
    stop_process_group,
)

log = logging.getLogger(__name__)

REQUIREMENTS = Path(__file__).parent / "s3-server-requirements.txt"
REGION = "us-east-1"
_STAMP = ".installed"


class S3ServerStartFailed(LocalStackError):
    """The S3-compatible server could not be installed or did not answer in time."""

    summary = "S3 server did not come up"


def server_venv_dir() -> Path:
    """The server's virtualenv: ``$CKPT_S3_VENV``, else ``.venv-s3`` of the source checkout, else
    under ``~/.cache/airflow-ckpt-provider``."""
    configured = os.environ.get("CKPT_S3_VENV")
    if configured:
        return Path(configured).expanduser().absolute()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "setup.cfg").is_file() and (checkout / "airflow_ckpt_provider").is_dir():
        return checkout / ".venv-s3"
    return Path.home() / ".cache" / "airflow-ckpt-provider" / "venv-s3"


def _requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def install_server(venv_dir: Path | None = None) -> Path:
    """Create the server's virtualenv and install the pinned requirements unless already done;
    returns the path of ``moto_server``. :class:`S3ServerStartFailed` with pip's output tail
    if the install fails (no stamp is left, so the next call retries)."""
    venv_dir = venv_dir or server_venv_dir()
    server = venv_dir / "bin" / "moto_server"
    stamp = venv_dir / _STAMP
    if server.is_file() and stamp.is_file() and stamp.read_text().strip() == _requirements_hash():
        return server
    log.info("installing the S3 test server (moto) into %s", venv_dir)
    python = str(venv_dir / "bin" / "python")
    for step in ("venv", "pip"):
        if step == "venv":
            cmd = [sys.executable, "-m", "venv", "--clear", str(venv_dir)]
        else:
            cmd = [python, "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise S3ServerStartFailed(
                found=f"`{' '.join(cmd[:4])} ...` exit code {done.returncode}",
                expected=f"moto installed from {REQUIREMENTS.name}",
                action="Check network access to PyPI (or a pip index configured in pip.conf) and retry.",
                detail="\n".join((done.stdout + done.stderr).splitlines()[-20:]))
    stamp.write_text(_requirements_hash())
    return server


class LocalS3(LocalServer):
    """moto's S3 server on 127.0.0.1; credentials are fixed test values (the server accepts any)."""

    def __init__(self, work_dir: Path, *, port: int | None = None, access_key: str = "ckpt-test-key",
                 secret_key: str = "ckpt-test-secret", startup_timeout: float = 180.0) -> None:
        self.work_dir = Path(work_dir)
        self._requested_port = port
        self.port = port or 0
        self.access_key = access_key
        self.secret_key = secret_key
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "moto-server.log"

    def processes(self) -> list[subprocess.Popen[bytes] | None]:
        return [self._process]

    def start(self) -> LocalS3:
        """Install (once) and start the server; return once it answers ListBuckets. Raises
        :class:`PortInUse` for a taken requested port, :class:`S3ServerStartFailed` if the
        install fails or the server exits or does not answer within ``startup_timeout``."""
        if self.running:
            return self
        server = install_server()
        if self._requested_port:
            ensure_port_free(self._requested_port, "S3 server")
        self.port = self._requested_port or free_port()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log.info("starting the S3 server (moto) on %s", self.endpoint_url)
        with open(self.log_file, "ab") as out:
            self._process = subprocess.Popen(
                [str(server), "-H", LOOPBACK, "-p", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        started = time.monotonic()
        last = "no answer yet"
        while time.monotonic() < started + self.startup_timeout:
            assert self._process is not None
            code = self._process.poll()
            if code is not None:
                raise S3ServerStartFailed(found=f"moto_server exited with code {code}", expected="a running server",
                                          action=f"Read {self.log_file} for the cause.", detail=log_tail(self.log_file))
            try:
                with urllib.request.urlopen(self.endpoint_url + "/", timeout=10) as answer:  # ListBuckets
                    if answer.status == 200 and b"ListAllMyBucketsResult" in answer.read():
                        log.info("S3 server ready on %s after %.1f s", self.endpoint_url, time.monotonic() - started)
                        return
                    last = f"HTTP {answer.status}"
            except (urllib.error.URLError, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.3)
        raise S3ServerStartFailed(
            found=f"no ListBuckets answer from {self.endpoint_url} after {self.startup_timeout:.0f} s (last: {last})",
            expected="an S3 server answering requests", action=f"Read {self.log_file}; on a slow machine raise "
            "startup_timeout.", detail=log_tail(self.log_file))

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL after ``timeout`` seconds."""
        proc, self._process = self._process, None
        stop_process_group(proc, f"the S3 server on {self.endpoint_url}", timeout)

    # -- clients ---------------------------------------------------------------------------------

    def storage_options(self) -> dict[str, Any]:
        """fsspec storage options of s3fs for this server (``s3://`` and ``s3a://`` URLs)."""
        return {"key": self.access_key, "secret": self.secret_key,
                "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": REGION}}

    def filesystem(self) -> Any:
        """A fresh s3fs filesystem for this server (no instance cache: tests see new objects)."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options())

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (an existing one is kept); returns it."""
        fs = self.filesystem()
        if not fs.exists(name):
            fs.call_s3("create_bucket", Bucket=name)
        return name

    def connection_uri(self) -> str:
        """An Airflow ``aws`` connection for this server (``AIRFLOW_CONN_<ID>``): login and password
        are the keys, the extra names the endpoint and region."""
        from urllib.parse import quote

        return (f"aws://{quote(self.access_key, safe='')}:{quote(self.secret_key, safe='')}@/"
                f"?endpoint_url={quote(self.endpoint_url, safe='')}&region_name={REGION}")

    def hadoop_conf(self) -> dict[str, str]:
        """Hadoop S3A settings (without the ``spark.hadoop.`` prefix) for this server; directory
        markers stay at Hadoop's default (kept)."""
        return {
            "fs.s3a.endpoint": self.endpoint_url,
            "fs.s3a.endpoint.region": REGION,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "fs.s3a.access.key": self.access_key,
            "fs.s3a.secret.key": self.secret_key,
        }

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for ``s3a://`` on this server: the S3A jars (:data:`jvm.S3A`, appended to
        any other ``spark.jars`` by the caller) and :meth:`hadoop_conf` as ``spark.hadoop.*``.
        :class:`JarsMissing` before ``make jvm``."""
        conf = {f"spark.hadoop.{key}": value for key, value in self.hadoop_conf().items()}
        conf["spark.jars"] = ",".join(str(path) for path in jvm.jars(jvm.S3A))
        return conf


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.harness.s3")
    parser.add_argument("command", choices=["install"], help="create the S3 test server's virtualenv")
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        server = install_server()
    except LocalStackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"S3 test server: {server}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
