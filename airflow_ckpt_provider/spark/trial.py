"""The trial contract, inside the user's Spark driver (imports only pyspark and the stdlib; the
provider's pure core, whose records the driver's files are, only when it writes one).

Before an upgrade stops anything, the provider tries the new version on COPIES (``ckpt
check-upgrade``, ``CompatibilityCheckOperator``): it launches the job with these conf keys::

    spark.ckpt.trial=true            this run is a trial (a dry run)
    spark.ckpt.trialSinkPath=URI     where every output of the trial goes (the provider chooses it)
    spark.ckpt.trialBatches=N        stop after N batches

A job follows the contract when it takes every output location from :func:`sink_location`
(which returns a folder under the trial sink in a trial, the job's own location otherwise), may
ask :func:`is_dry_run` to skip other side effects, and runs its query with
:class:`airflow_ckpt_provider.spark.GracefulStop` (which stops a trial after N batches and
records ``_ckpt/trial.json`` in the trial's checkpoint). The provider refuses trials of a job
that does not (see :func:`declares_contract`), and refuses a trial whose record says that no
output went through :func:`sink_location`.

In a trial, :func:`airflow_ckpt_provider.spark.read_kafka` drops a ``kafka.group.id`` option
(Spark then uses its own generated group) so no consumer group of the live job is touched;
Spark's Kafka source commits no offsets to Kafka.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_ckpt_provider.checkpoint.compat import StatefulOperator

log = logging.getLogger(__name__)

CONF_TRIAL = "spark.ckpt.trial"
CONF_TRIAL_SINK = "spark.ckpt.trialSinkPath"
CONF_TRIAL_BATCHES = "spark.ckpt.trialBatches"
#: the trial's record, in the trial's checkpoint
TRIAL_RECORD = "_ckpt/trial.json"
#: the stateful operators of the query's executed plan (every run writes it, live runs included)
OPERATORS_RECORD = "_ckpt/stateful-operators.json"
#: what a job's source must call to follow the contract
CONTRACT_CALLS = ("sink_location", "GracefulStop")

_redirected: dict[str, str] = {}


def _conf(spark: Any, key: str) -> str:
    value = spark.conf.get(key, None)
    return "" if value is None else str(value)


def is_dry_run(spark: Any) -> bool:
    """Whether this run is a trial of the provider's compatibility check: write nothing but to
    :func:`sink_location`, touch nothing the live job uses."""
    return _conf(spark, CONF_TRIAL).lower() == "true"


def trial_batches(spark: Any) -> int | None:
    """How many batches a trial runs (None outside a trial)."""
    if not is_dry_run(spark):
        return None
    raw = _conf(spark, CONF_TRIAL_BATCHES) or "1"
    return max(1, int(raw))


def sink_location(spark: Any, default: str, name: str = "output") -> str:
    """Where the job writes its output ``name``: ``default`` in a normal run; in a trial, the
    folder ``name`` under ``spark.ckpt.trialSinkPath`` (``ValueError`` when a trial has none).
    Call it for every output the job writes."""
    if not is_dry_run(spark):
        return default
    root = _conf(spark, CONF_TRIAL_SINK).rstrip("/")
    if not root:
        raise ValueError(f"a trial run without {CONF_TRIAL_SINK}: the provider sets it")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "output"
    _redirected[safe] = default
    location = f"{root}/{safe}"
    log.info("trial run: output %s goes to %s instead of %s", safe, location, default)
    return location


def redirected_outputs() -> dict[str, str]:
    """The outputs redirected by :func:`sink_location` in this driver (name -> live location)."""
    return dict(_redirected)


def stateful_operators(query: Any) -> list[dict[str, Any]] | None:
    """The stateful operators of the query's last executed plan: id, node name and detail (the
    join type of a stream-stream join, the keys of others); None when the plan cannot be read
    (no batch yet, Spark Connect)."""
    try:
        plan = str(query._jsq.explainInternal(False))
    except Exception:  # noqa: BLE001 - Spark Connect or no execution yet
        return None
    return parse_stateful_operators(plan)


_NODE = re.compile(r"^[\s:|+\-]*(?:\*\(\d+\)\s*)?([A-Za-z]+)\s*(.*)$")
_OP_ID = re.compile(r"opId = (\d+)")


def parse_stateful_operators(plan: str) -> list[dict[str, Any]]:
    """Stateful operators of a physical plan's text (see :func:`stateful_operators`); an
    operator that appears twice (``StateStoreRestore`` below ``StateStoreSave``) once, by its top node."""
    found: dict[int, dict[str, Any]] = {}
    for line in plan.splitlines():
        op = _OP_ID.search(line)
        node = _NODE.match(line)
        if not op or not node:
            continue
        op_id = int(op.group(1))
        if op_id in found:
            continue
        name, rest = node.group(1), node.group(2)
        if "Join" in name:
            parts = [p.strip() for p in rest.split(", ")]
            detail = next((p for p in parts if p in ("Inner", "LeftOuter", "RightOuter", "FullOuter", "LeftSemi")), "")
        else:
            keys = re.match(r"\[([^\]]*)\]", rest)
            detail = re.sub(r"#\d+L?", "", keys.group(1)) if keys else ""
        found[op_id] = {"operator_id": op_id, "name": name, "detail": detail}
    return [found[i] for i in sorted(found)]


def _operators(operators: list[dict[str, Any]]) -> tuple[StatefulOperator, ...]:
    from airflow_ckpt_provider.checkpoint.compat import StatefulOperator  # the core, only when writing

    return tuple(StatefulOperator.from_dict(o) for o in operators)


def operators_record(operators: list[dict[str, Any]]) -> bytes:
    """The ``_ckpt/stateful-operators.json`` a driver writes once its first batch ran
    (:class:`~airflow_ckpt_provider.checkpoint.compat.StatefulOperators`)."""
    from airflow_ckpt_provider.checkpoint.compat import StatefulOperators

    return StatefulOperators(_operators(operators)).to_json().encode()


def trial_record(*, batches: int, operators: list[dict[str, Any]] | None, error: str = "") -> bytes:
    """The ``_ckpt/trial.json`` a trial's driver writes when it ends
    (:class:`~airflow_ckpt_provider.checkpoint.compat.TrialRecord`)."""
    from airflow_ckpt_provider.checkpoint.compat import TrialRecord

    return TrialRecord(batches=batches, operators=None if operators is None else _operators(operators),
                       outputs=redirected_outputs(), error=error).to_json().encode()


__all__ = ["CONF_TRIAL", "CONF_TRIAL_BATCHES", "CONF_TRIAL_SINK", "CONTRACT_CALLS", "OPERATORS_RECORD",
           "TRIAL_RECORD", "is_dry_run", "operators_record", "parse_stateful_operators", "redirected_outputs",
           "sink_location",
           "stateful_operators", "trial_batches", "trial_record"]
