"""docs/src/own-job.md works as written: its samples, run in order, upgrade a job with 0 lost / 0 duplicated.

The page's convention (docs/src/development.md, "Samples that run"): a ```python block whose first
line is ``# file: NAME`` is saved as NAME in the work folder; a ```bash block runs there with
bash, ``-e``, in one shell session (exports carry over to the next block); other blocks
(```shell, ```text) are not run — the ```shell setup (the installed wheel, a fresh folder) is what
this test provides: the wheel as a user installs it (``make wheel-venv``: .venv-wheel, its bin/ first
on PATH), a fresh temporary folder outside the checkout, no PYTHONPATH, no Airflow settings in the
environment; the JVM jars of the checkout's ``make jvm`` (``CKPT_JVM_DIR``). Nothing is faked: the
page's own commands start the broker, the jobs and the DAG. The proof is the page's own audit
output: every expected record in the sink, none lost, duplicated or unexpected, and the filter's
records really dropped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_ckpt_provider.local.jvm import jvm_dir
from tests.harness.upgrade_demo import stop_jobs_under

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "src" / "own-job.md"
FENCE = re.compile(r"^```(?P<lang>[a-z]*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
FILE_MARK = re.compile(r"\A# file: (?P<name>[\w-][\w.-]*(?:/[\w-][\w.-]*)*)\n")  # a relative path, no ..
RUN, SHOWN = {"bash", "python"}, {"shell", "text"}
AUDIT_LINE = re.compile(r"(?P<dropped>\d+) dropped, (?P<expected>\d+) expected, (?P<in_sink>\d+) in the sink: "
                        r"(?P<lost>\d+) lost, (?P<dup>\d+) duplicated, (?P<unexpected>\d+) unexpected")
#: Per block; generous: two Spark jobs and the DAG share 2 cores with other tests.
BLOCK_TIMEOUT_S = 2400


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int

    @property
    def file_name(self) -> str | None:
        found = FILE_MARK.match(self.body)
        return found["name"] if found else None


def page_blocks(text: str) -> list[Block]:
    """The fenced blocks to run, in page order; ``AssertionError`` for a block outside the convention."""
    blocks = []
    for found in FENCE.finditer(text):
        block = Block(found["lang"], found["body"], text.count("\n", 0, found.start()) + 1)
        assert block.lang in RUN | SHOWN, f"own-job.md line {block.line}: fence `{block.lang}` is neither run " \
                                          f"({sorted(RUN)}) nor shown-only ({sorted(SHOWN)})"
        if block.lang == "python":
            assert block.file_name, f"own-job.md line {block.line}: a python block must start with `# file: NAME`"
        if block.lang in RUN:
            blocks.append(block)
    return blocks


def session_env() -> dict[str, str]:
    """An empty shell with the installed wheel's virtualenv activated: nothing of the checkout on
    ``sys.path`` (no PYTHONPATH), only its JVM jars (``make jvm``). Fails (never skips) when
    ``make wheel-venv`` has not run."""
    venv = REPO / ".venv-wheel"
    if not (venv / ".installed").is_file():
        pytest.fail(f"found no installed wheel ({venv}/.installed missing); expected the virtualenv `make wheel-venv` "
                    "builds (`make test` and `make system` do it first); run `make wheel-venv`", pytrace=False)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "PYSPARK", "SPARK_HOME")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    env.setdefault("CKPT_JVM_DIR", str(jvm_dir()))  # the checkout's .jvm (make jvm), as the tests use it
    return env


def run_bash(block: Block, work: Path, env_file: Path, transcript: list[str]) -> str:
    """Run ``block`` in ``work`` with the exports of the blocks before it; returns its output."""
    script = f"set -e\nsource {env_file}\n{block.body}\nexport -p > {env_file}\n"
    done = subprocess.run(["bash", "-c", script], cwd=work, env=session_env(), capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S, check=False)
    transcript.append(f"$ (own-job.md line {block.line})\n{block.body}{done.stdout}{done.stderr}")
    if done.returncode != 0:
        pytest.fail(f"own-job.md block at line {block.line} exited {done.returncode}:\n{block.body}\n"
                    f"--- output (tail) ---\n" + "\n".join((done.stdout + done.stderr).splitlines()[-80:]),
                    pytrace=False)
    return done.stdout


def stop_producer(work: Path) -> None:
    """The page's background producer (``producer.pid``), if a failed block left it running."""
    try:
        pid = int((work / "producer.pid").read_text())
        if b"produce.py" in Path(f"/proc/{pid}/cmdline").read_bytes():  # still it, not a reused pid
            os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        pass


def test_own_job_page_runs_as_written_and_the_audit_is_exact(tmp_path: Path) -> None:
    text = PAGE.read_text()
    blocks = page_blocks(text)
    assert [b.file_name for b in blocks if b.lang == "python"], "the page writes no job"
    claimed = AUDIT_LINE.search(text)
    assert claimed, "the page does not say what its audit prints"

    work = tmp_path / "own-job"
    work.mkdir()
    env_file = tmp_path / "session.env"
    env_file.write_text("")
    transcript: list[str] = []
    outputs = []
    try:
        for block in blocks:
            if block.lang == "python":
                (work / str(block.file_name)).parent.mkdir(parents=True, exist_ok=True)
                (work / str(block.file_name)).write_text(block.body)
            else:
                outputs.append(run_bash(block, work, env_file, transcript))
        status = subprocess.run(["ckpt", "dev-stack", "status"], cwd=work, env=session_env(), capture_output=True,
                                text=True, timeout=120, check=False)
        assert status.returncode == 4, f"the page's last step leaves the broker running: {status.stdout}"
    finally:
        (tmp_path / "transcript.txt").write_text("\n".join(transcript))
        stop_jobs_under(work)  # whatever a failed block left running: Spark jobs, the broker
        stop_producer(work)

    audits = [found for out in outputs for found in AUDIT_LINE.finditer(out)]
    assert len(audits) == 1, f"expected one audit line in the page's output, found {len(audits)}"
    result = audits[0]
    assert (result["lost"], result["dup"], result["unexpected"]) == ("0", "0", "0"), result[0]
    assert result["in_sink"] == result["expected"] and int(result["expected"]) > 0, result[0]
    assert int(result["dropped"]) > 0, f"the filter dropped nothing: the audit's dropped records went untested ({result[0]})"
    assert (claimed["lost"], claimed["dup"], claimed["unexpected"]) == ("0", "0", "0"), claimed[0]
