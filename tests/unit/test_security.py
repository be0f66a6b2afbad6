"""Security: no shell, no leaked secrets, no world-writable files.

* Subprocesses: a static scan (``ast``) of the whole package finds every process start and
  proves it gets an argument list and never ``shell=True``; the launcher's command reaches a real
  (fake) spark-submit argument by argument, hostile characters included.
* Secrets: a Kafka connection with a SASL password, and Spark conf with passwords, keys, tokens
  and a JAAS config, go through the hook, the handover operator, the launcher, the launch handle
  (XCom), the archive manifest and ``ckpt inspect``; the secret strings must appear nowhere in the
  captured logs (DEBUG, every logger, plus stdout/stderr), return values, files written, or
  ``repr``/``str`` of hooks and errors - while each test also proves the secret WAS in play.
* Files: what this package writes itself is not group/world-writable even under umask 0.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.errors import BrokerError, BrokerUnreachable, CheckpointError
from airflow_ckpt_provider.checkpoint.manifest import ArchiveManifest, redact_conf
from airflow_ckpt_provider.checkpoint.secrets import (
    REDACTED,
    find_secrets,
    is_sensitive_key,
    redact_command,
    redact_text,
)
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook, launcher_jar
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from tests.unit.conftest import write_checkpoint

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_ckpt_provider"

SASL_SECRET = "s3cr3t-sasl-Zq81"
CONN_SECRET = "s3cr3t-conn-Kp27"
AWS_SECRET = "s3cr3t-aws-Wx55"
AWS_ACCESS = "AKIAS3CR3TACCESS77"
JAAS_SECRET = "s3cr3t-jaas-Mv03"
TOKEN_SECRET = "s3cr3t-token-Lr19"
TRUST_SECRET = "s3cr3t-trust-Hb64"
SECRETS = (SASL_SECRET, CONN_SECRET, AWS_SECRET, AWS_ACCESS, JAAS_SECRET, TOKEN_SECRET, TRUST_SECRET)

SECRET_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.hadoop.fs.s3a.access.key": AWS_ACCESS,
    "spark.hadoop.fs.s3a.secret.key": AWS_SECRET,
    "spark.kafka.clusters.main.sasl.jaas.config":
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="{JAAS_SECRET}";',
    "spark.kafka.clusters.main.auth.token": TOKEN_SECRET,
    "spark.executor.extraJavaOptions": f"-Xss4m -Djavax.net.ssl.trustStorePassword={TRUST_SECRET}",
}


def leaks(*texts: object) -> list[str]:
    """Which secrets occur in any of ``texts`` (rendered with str and repr)."""
    blob = "\n".join(f"{t}\n{t!r}" for t in texts)
    return [s for s in SECRETS if s in blob]


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Capture every logger at DEBUG, including kafka-python's (set to WARNING by the test conftest)."""
    caplog.set_level(logging.DEBUG)
    for name in ("kafka", "airflow", "airflow_ckpt_provider", "py4j"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


# -- subprocesses: argument lists only, never a shell --------------------------------------------

_SPAWN = {"Popen", "run", "call", "check_call", "check_output"}
_FORBIDDEN = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"),
              ("asyncio", "create_subprocess_shell"), ("pty", "spawn")}
_LISTY = ("list[", "List[", "Sequence[", "tuple[", "Tuple[")


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), filename=str(path))


def _aliases(tree: ast.Module) -> dict[str, tuple[str, str | None]]:
    """Local name -> (module, attribute or None) for ``import m [as n]`` and ``from m import a [as n]``."""
    names: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name] = (alias.name, None)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = (node.module, alias.name)
    return names


def _target(call: ast.Call, aliases: dict[str, tuple[str, str | None]], runners: set[str]) -> tuple[str, str] | None:
    """(module, function) a call starts a process with, or None."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in runners:  # options.runner(...)
        return "subprocess", "run"
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        module = aliases.get(func.value.id, (func.value.id, None))
        if module[1] is None:
            return module[0], func.attr
    if isinstance(func, ast.Name):
        if func.id in runners:
            return "subprocess", "run"
        module, attr = aliases.get(func.id, ("", None))
        if attr is not None:
            return module, attr
    return None


def _runner_parameters(tree: ast.Module) -> set[str]:
    """Parameters and dataclass fields whose default is ``subprocess.run``/``Popen``
    (dependency-injected runners)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and isinstance(node.value, ast.Attribute) and node.value.attr in _SPAWN:
            found.add(node.target.id)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults)
            defaults += list(node.args.kw_defaults)
            for arg, default in zip(args, defaults, strict=False):
                if isinstance(default, ast.Attribute) and default.attr in _SPAWN:
                    found.add(arg.arg)
    return found


def _is_argument_list(expr: ast.expr, function: ast.FunctionDef | None, tree: ast.Module) -> bool:
    """A list/tuple display, ``list(...)``, or a name bound to one / annotated as a sequence."""
    if isinstance(expr, (ast.List, ast.Tuple, ast.ListComp)):
        return True
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("list", "tuple"):
        return True
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _is_argument_list(expr.left, function, tree) and _is_argument_list(expr.right, function, tree)
    if not isinstance(expr, ast.Name) or function is None:
        return False
    for arg in function.args.args + function.args.kwonlyargs:
        if arg.arg == expr.id and arg.annotation is not None:
            return ast.unparse(arg.annotation).startswith(_LISTY)
    bound = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == expr.id:
                    bound.append(_is_argument_list(node.value, function, tree))
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Call):
                    names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
                    if expr.id in names:
                        bound.append(_returns_list_at(node.value, names.index(expr.id), tree))
    return bool(bound) and all(bound)


def _returns_list_at(call: ast.Call, index: int, tree: ast.Module) -> bool:
    """Whether ``call`` (``f(...)`` or ``self.f(...)``, defined in this module) returns a tuple whose
    element ``index`` is annotated as a sequence."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name and isinstance(node.returns, ast.Subscript):
            elements = node.returns.slice.elts if isinstance(node.returns.slice, ast.Tuple) else []
            return index < len(elements) and ast.unparse(elements[index]).startswith(_LISTY)
    return False


def _process_starts() -> list[tuple[str, int, str, ast.Call, ast.FunctionDef | None, ast.Module]]:
    starts = []
    for path, tree in _modules():
        aliases, runners = _aliases(tree), _runner_parameters(tree)
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            target = _target(node, aliases, runners)
            if target is None:
                continue
            enclosing = min((f for f in functions if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)),
                            key=lambda f: (f.end_lineno or f.lineno) - f.lineno, default=None)
            starts.append((str(path.relative_to(PACKAGE)), node.lineno, ".".join(target), node, enclosing, tree))
    return starts


def test_no_shell_and_no_shell_helpers_anywhere() -> None:
    offences = []
    for path, tree in _modules():
        aliases = _aliases(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            target = _target(node, aliases, set())
            if target in _FORBIDDEN:
                offences.append(f"{path.name}:{node.lineno} {'.'.join(target)}")
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant) and keyword.value.value is False):
                    offences.append(f"{path.name}:{node.lineno} shell={ast.unparse(keyword.value)}")
    assert offences == []


def test_every_process_start_gets_an_argument_list() -> None:
    starts = [s for s in _process_starts() if s[2].startswith("subprocess.") and s[2].split(".")[1] in _SPAWN]
    where = {f"{file}:{call}" for file, _, call, *_ in starts}
    # the scan sees the job kinds, the supervisor, the command runner and the local stack (it is not vacuous)
    assert {"jobs/local.py:subprocess.Popen", "jobs/supervise.py:subprocess.Popen",
            "local/kafka.py:subprocess.Popen"} <= where, where
    assert any(file == "jobs/base.py" for file, *_ in starts), "runner=subprocess.run injection not seen"
    bad = []
    for file, line, call, node, function, tree in starts:
        first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "args"), None)
        if first is None or not _is_argument_list(first, function, tree):
            bad.append(f"{file}:{line} {call}({ast.unparse(first) if first is not None else ''})")
    assert bad == [], "process starts whose command is not provably an argument list"


def test_the_scan_would_catch_a_shell_string(tmp_path: Path) -> None:
    """The checker itself can fail: a string command and shell=True are both flagged."""
    tree = ast.parse("import subprocess\ndef f(x):\n    cmd = 'ls ' + x\n    subprocess.run(cmd, shell=True)\n")
    aliases = _aliases(tree)
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and _target(n, aliases, set()))
    function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    assert not _is_argument_list(call.args[0], function, tree)
    assert any(k.arg == "shell" for k in call.keywords)


HOSTILE = ["a b", "it's", '"quoted"', "$(touch {pwned})", "`touch {pwned}`", "x; touch {pwned}", "line\nbreak", "*"]


def fake_submit(folder: Path) -> tuple[str, Path]:
    """A spark-submit that records its argv (NUL separated) and exits."""
    record = folder / "argv.bin"
    script = folder / "spark-submit"
    script.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" > '{record}'\necho submitted\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), record


def wait_exited(pid: int) -> None:
    """Reap a launched child; subprocess may have reaped it already (then it has exited)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def test_launcher_passes_each_argument_verbatim_to_a_real_process(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    hostile = [h.format(pwned=pwned) for h in HOSTILE]
    binary, record = fake_submit(tmp_path)
    hook = SparkLauncherHook(master="local[1]", spark_binary=binary, log_dir=str(tmp_path / "logs"))
    conf = {f"spark.test.k{i}": value for i, value in enumerate(hostile)}
    mode, command, _ = hook.build_command("job.py", application_args=hostile, conf=conf, checkpoint_uri=str(tmp_path / "cp"))
    assert isinstance(command, list) and all(isinstance(a, str) for a in command)
    for i, value in enumerate(hostile):
        assert f"spark.test.k{i}={value}" in command  # one element per --conf pair, no quoting
    assert command[-len(hostile):] == hostile

    handle = hook.launch("job.py", checkpoint_uri=str(tmp_path / "cp"), application_args=hostile, conf=conf)
    wait_exited(handle.pid)
    received = record.read_bytes().split(b"\0")[:-1]
    assert [a.decode() for a in received] == command, "the process got exactly the argument list"
    assert not pwned.exists(), "nothing was interpreted by a shell"


# -- secrets: recognised and redacted -----------------------------------------------------------------


@pytest.mark.parametrize("key", [
    "password", "spark.ssl.keyStorePassword", "spark.ssl.keyPassword", "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.access.key", "fs.azure.account.key.acct.dfs.core.windows.net", "spark.authenticate.secret",
    "kafka.sasl.jaas.config", "spark.kafka.clusters.c.sasl.jaas.config", "sasl.password", "ssl.key.password",
    "spark.kafka.clusters.c.auth.token", "spark.hadoop.fs.gs.auth.service.account.private.key",
    "spark.hadoop.google.cloud.auth.service.account.json.keyfile_dict", "aws_secret_access_key", "apiKey",
    "spark.hadoop.fs.azure.sas.token", "spark.hadoop.fs.s3a.session.token", "credentials", "Authorization",
])
def test_sensitive_keys(key: str) -> None:
    assert is_sensitive_key(key)
    assert redact_conf({key: "v4lue"}) == {key: REDACTED}


@pytest.mark.parametrize("key", [
    "spark.sql.shuffle.partitions", "spark.sql.streaming.stateStore.providerClass", "spark.ssl.keyStore",
    "spark.kerberos.keytab", "spark.kerberos.principal", "spark.ckpt.startingOffsets", "spark.ckpt.checkpointLocation",
    "bootstrap.servers", "sasl.mechanism", "security.protocol", "sasl.username", "spark.sql.streaming.multipleWatermarkPolicy",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion", "spark.io.encryption.keySizeBits",
])
def test_ordinary_keys_are_kept(key: str) -> None:
    assert not is_sensitive_key(key)
    assert redact_conf({key: "2"}) == {key: "2"}


def test_covers_airflow_sensitive_fields() -> None:
    masker = pytest.importorskip("airflow.sdk._shared.secrets_masker")
    for field in masker.DEFAULT_SENSITIVE_FIELDS:
        assert is_sensitive_key(field) and is_sensitive_key(f"spark.hadoop.x.{field}"), field
    for key in SECRET_CONF:
        if masker.should_hide_value_for_key(key):
            assert is_sensitive_key(key), key


def test_redact_text_and_command() -> None:
    assert redact_text(f'ScramLoginModule required username="svc" password="{JAAS_SECRET}";') == \
        f'ScramLoginModule required username="svc" password="{REDACTED}";'
    assert redact_text(f"-Djavax.net.ssl.trustStorePassword={TRUST_SECRET} -Xss4m") == \
        f"-Djavax.net.ssl.trustStorePassword={REDACTED} -Xss4m"
    assert redact_text(f"sasl://svc:{SASL_SECRET}@broker:9093") == f"sasl://svc:{REDACTED}@broker:9093"
    assert redact_text(f"Authorization: Bearer {TOKEN_SECRET}") == f"Authorization: Bearer {REDACTED}"
    assert redact_text(json.dumps({"sasl.password": SASL_SECRET})) == json.dumps({"sasl.password": REDACTED})
    assert find_secrets(f'username="svc" password="{JAAS_SECRET}"; Bearer {TOKEN_SECRET} x://u:{CONN_SECRET}@h') == [
        JAAS_SECRET, CONN_SECRET, TOKEN_SECRET]
    argv = ["spark-submit", "--conf", f"spark.hadoop.fs.s3a.secret.key={AWS_SECRET}", "-c",
            f"spark.kafka.clusters.main.auth.token={TOKEN_SECRET}", f"--conf=spark.ssl.keyPassword={TRUST_SECRET}",
            "--conf", "spark.sql.shuffle.partitions=2", "job.py", "--password", SASL_SECRET,
            f"--token={TOKEN_SECRET}", f"jdbc.password={CONN_SECRET}", "--flag", "a b"]
    redacted = redact_command(argv)
    assert leaks(redacted) == [] and len(redacted) == len(argv)
    assert redacted[-2:] == ["--flag", "a b"] and "spark.sql.shuffle.partitions=2" in redacted
    assert argv[2].endswith(AWS_SECRET), "the command itself is not changed"


def test_manifest_never_records_secret_conf(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "cp"), conf=SECRET_CONF)
    assert AWS_SECRET in (tmp_path / "cp" / "offsets" / "2").read_text(), "the checkpoint does carry the secrets"
    fs = fsspec.filesystem("file")
    manifest = CheckpointArchive(fs, str(tmp_path / "archive")).archive(
        fs, built.root, stream_name="orders", upgrade_id="u1")
    assert manifest.spark_conf["spark.sql.shuffle.partitions"] == "2"
    assert manifest.spark_conf["spark.hadoop.fs.s3a.secret.key"] == REDACTED
    assert manifest.spark_conf["spark.executor.extraJavaOptions"] == f"-Xss4m -Djavax.net.ssl.trustStorePassword={REDACTED}"
    written = (Path(manifest.archive_uri) / "manifest.json").read_text()
    assert leaks(manifest.to_json(), manifest.summary(), written) == []
    assert ArchiveManifest.from_json(written) == manifest  # redaction is stable across a round trip
    out, err = _cli("inspect", built.root, "--json")
    assert json.loads(out)["conf"]["spark.hadoop.fs.s3a.access.key"] == REDACTED and leaks(out, err) == []


def _cli(*argv: str) -> tuple[str, str]:
    import io

    out, err = io.StringIO(), io.StringIO()
    assert cli.main(list(argv), stdout=out, stderr=err) == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


def test_launch_handle_never_carries_secrets() -> None:
    command = ["spark-submit", "--conf", f"spark.hadoop.fs.s3a.secret.key={AWS_SECRET}", "job.py",
               "--password", SASL_SECRET]
    handle = LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri="/cp", app_name="a", started_at="2026-01-01T00:00:00",
                          pid=4242, master=f"spark://svc:{CONN_SECRET}@m:7077",
                          extra={"command": json.dumps(command), "note": f"token={TOKEN_SECRET}"})
    assert leaks(handle, handle.to_json()) == []
    assert json.loads(handle.extra["command"])[:2] == ["spark-submit", "--conf"]
    raw = json.loads(handle.to_json())
    raw["extra"]["command"] = json.dumps(command)  # an XCom written before redaction existed
    assert leaks(LaunchHandle.from_json(raw).to_json()) == []


def test_spark_submit_command_is_masked_in_logs_xcom_and_tails(tmp_path: Path, all_logs, capfd) -> None:  # noqa: ANN001
    binary, record = fake_submit(tmp_path)
    script = Path(binary)
    script.write_text(script.read_text() + f'echo "conf spark.hadoop.fs.s3a.secret.key={AWS_SECRET}" >&2\nexit 1\n')
    hook = SparkLauncherHook(master="spark://m:7077", deploy_mode="cluster", spark_binary=binary,
                             log_dir=str(tmp_path / "logs"))
    with pytest.raises(CheckpointError) as failed:  # cluster mode: spark-submit's output becomes the tail
        hook.launch("app.jar", checkpoint_uri="/cp", conf=SECRET_CONF, application_args=["--password", SASL_SECRET])
    assert SASL_SECRET.encode() in record.read_bytes() and JAAS_SECRET.encode() in record.read_bytes(), \
        "the secrets did reach spark-submit"
    local = SparkLauncherHook(master="local[1]", spark_binary=binary, log_dir=str(tmp_path / "logs"))
    handle = local.launch("job.py", checkpoint_uri=str(tmp_path / "cp"), conf=SECRET_CONF)
    wait_exited(handle.pid)
    out, err = capfd.readouterr()
    logged = all_logs.text + out + err
    assert "Spark-Submit cmd" in logged, "the command log line was captured (positive control)"
    assert leaks(logged, failed.value, failed.value.log_tail, handle.to_json(), local.log_tail(handle)) == []


# -- secrets: the Kafka connection --------------------------------------------------------------------


class FakeConsumer:
    """kafka-python's consumer at the process boundary: records the settings it was given."""

    seen: list[dict[str, Any]] = []
    fail_with: Exception | None = None

    def __init__(self, config: dict[str, Any]) -> None:
        FakeConsumer.seen.append(dict(config))
        if FakeConsumer.fail_with is not None:
            raise FakeConsumer.fail_with

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1, 2, 3}

    def beginning_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        return {tp: 0 for tp in partitions}

    def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        return {tp: 10_000 for tp in partitions}

    def close(self) -> None:
        pass


@pytest.fixture
def secret_connection(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    extra = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.username": "svc", "sasl.password": SASL_SECRET}
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_SECRET_KAFKA",
                       json.dumps({"conn_type": "ckpt_kafka", "login": "svc", "password": CONN_SECRET, "extra": extra}))
    monkeypatch.setattr(KafkaBroker, "_make_consumer", lambda self: FakeConsumer(self.client_config))
    FakeConsumer.seen, FakeConsumer.fail_with = [], None
    yield "ckpt_secret_kafka"
    FakeConsumer.seen, FakeConsumer.fail_with = [], None


def test_handover_operator_never_leaks_the_connection_secret(secret_connection: str, tmp_path: Path, all_logs,  # noqa: ANN001
                                                             capfd) -> None:  # noqa: ANN001
    from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator

    built = write_checkpoint(str(tmp_path / "cp"), conf=SECRET_CONF)
    op = CheckpointHandoverOperator(task_id="extract", checkpoint_uri=built.uri, kafka_conn_id=secret_connection)
    xcom = op.execute(context={})  # type: ignore[arg-type]
    assert FakeConsumer.seen and FakeConsumer.seen[0]["sasl_plain_password"] == CONN_SECRET, "the secret was used"
    out, err = capfd.readouterr()
    assert "startingOffsets" in all_logs.text + out + err, "the operator's logs were captured (positive control)"
    assert leaks(json.dumps(xcom), all_logs.text, out, err, op.kafka_hook, op.kafka_hook.broker) == []


@pytest.mark.parametrize("failure", ["echoing client error", "rejected setting"])
def test_broker_errors_never_echo_the_secret(secret_connection: str, failure: str, all_logs, capfd) -> None:  # noqa: ANN001
    from kafka.errors import KafkaConnectionError

    from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook

    # the worst case: a client library whose message repeats its whole configuration
    config = KafkaBrokerHook(secret_connection).client_config()
    FakeConsumer.fail_with = (KafkaConnectionError(f"cannot connect with {config}") if failure == "echoing client error"
                              else TypeError(f"bad value {config['sasl_plain_password']!r}"))
    hook = KafkaBrokerHook(secret_connection)
    with pytest.raises(BrokerError) as refused:
        hook.broker_view(["events"])
    error = refused.value
    assert isinstance(error, BrokerUnreachable) == (failure == "echoing client error")
    out, err = capfd.readouterr()
    assert leaks(error, error.found, error.expected, error.action, all_logs.text, out, err, hook, hook.broker) == []
    assert REDACTED in error.found, "the message was scrubbed, not dropped"


def test_real_client_against_a_dead_broker_never_logs_the_secret(all_logs, capfd) -> None:  # noqa: ANN001
    broker = KafkaBroker("127.0.0.1:1", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                         sasl_plain_username="svc", sasl_plain_password=SASL_SECRET, bootstrap_timeout_ms=300)
    with pytest.raises(BrokerUnreachable) as refused:
        broker.view(["events"])
    out, err = capfd.readouterr()
    assert "ECONNREFUSED" in all_logs.text + out + err or "bootstrap" in (all_logs.text + out + err).lower()
    assert leaks(refused.value, all_logs.text, out, err, broker) == []


# -- files: not writable by others, whatever the umask --------------------------------------------------


@pytest.fixture
def umask0() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _writable_by_others(path: Path) -> bool:
    return bool(path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def test_launcher_logs_are_private_under_umask_0(tmp_path: Path, umask0: None) -> None:
    binary, _ = fake_submit(tmp_path)
    logs = tmp_path / "logs"
    handle = SparkLauncherHook(master="local[1]", spark_binary=binary, log_dir=str(logs)).launch(
        "job.py", checkpoint_uri=str(tmp_path / "cp"))
    wait_exited(handle.pid)
    cluster = SparkLauncherHook(master="yarn", deploy_mode="cluster", spark_binary=binary, log_dir=str(logs))
    with pytest.raises(CheckpointError):  # no application id printed; its output file is written anyway
        cluster.launch("job.py", checkpoint_uri="/cp")
    files = sorted(logs.iterdir())
    assert len(files) == 2
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path} {oct(path.stat().st_mode)}"
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700


def test_launcher_jar_is_not_writable_by_others_under_umask_0(tmp_path: Path, umask0: None) -> None:
    jar = launcher_jar(tmp_path / "cache")
    assert not _writable_by_others(jar) and not _writable_by_others(jar.parent)


def test_stop_request_is_not_writable_by_others_under_umask_0(tmp_path: Path, umask0: None) -> None:
    from airflow_ckpt_provider.checkpoint.stop import new_request
    from airflow_ckpt_provider.storage.stop import ControlFiles

    control = ControlFiles(fsspec.filesystem("file"), str(tmp_path / "cp"))
    control.write_request(new_request("me", "test", 10))
    for path in (tmp_path / "cp" / "_ckpt", tmp_path / "cp" / "_ckpt" / "stop-request.json"):
        assert not _writable_by_others(path), f"{path} {oct(path.stat().st_mode)}"


def test_launcher_registers_secret_conf_with_airflows_masker() -> None:
    from airflow.sdk.log import _secrets_masker

    masker = _secrets_masker()
    probe = f"x {AWS_SECRET} {JAAS_SECRET} {TOKEN_SECRET} y"
    SparkLauncherHook(master="local[1]").build_command("job.py", conf=SECRET_CONF)
    assert leaks(masker.redact(probe)) == [] and masker.redact("spark.sql.shuffle.partitions=2").endswith("=2")
