"""Apply the handover inside the user's Spark driver (imports only pyspark and the stdlib).

The launcher passes the handover as Spark conf keys (``--conf``), so the job's code needs no
extra arguments::

    spark.ckpt.checkpointLocation   the NEW checkpoint location
    spark.ckpt.startingOffsets      Kafka startingOffsets JSON ({"topic": {"0": 23}}; -2 earliest)
    spark.ckpt.handoverJson         optional: the full handover, for the job's own records

In the job::

    from airflow_ckpt_provider.spark.kafka import checkpoint_location, read_kafka

    frame = read_kafka(spark, topics="orders", bootstrap_servers="broker:9092")
    frame.writeStream.option("checkpointLocation", checkpoint_location(spark)) ...

``startingOffsets`` is only honoured by Spark on a checkpoint without offsets, which is why the
launcher refuses to start on a non-empty checkpoint.

In a standby launch (``spark.ckpt.standby=true``) these keys arrive later, with the release;
every helper here first calls :func:`airflow_ckpt_provider.spark.standby.await_handover`, which
returns at once in a cold launch.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider import json_limits
from airflow_ckpt_provider.records.control import CONF_CHECKPOINT_LOCATION, CONF_HANDOVER_JSON, CONF_STARTING_OFFSETS
from airflow_ckpt_provider.source_header import SOURCE_HEADER
from airflow_ckpt_provider.spark.standby import await_handover, warm_up_session
from airflow_ckpt_provider.spark.trial import is_dry_run

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

__all__ = ["CONF_CHECKPOINT_LOCATION", "CONF_HANDOVER_JSON", "CONF_STARTING_OFFSETS", "checkpoint_location",
           "handed_over_starting_offsets", "handover_json", "read_kafka", "warm_up_options"]


def _conf(spark: SparkSession, key: str) -> str | None:
    value = spark.conf.get(key, None)
    return value if value not in (None, "") else None


def checkpoint_location(spark: SparkSession, default: str | None = None) -> str:
    """The checkpoint location the launcher chose (``spark.ckpt.checkpointLocation``), else
    ``default``; ``ValueError`` when neither is set. A standby waits for its release first."""
    await_handover(spark)
    value = _conf(spark, CONF_CHECKPOINT_LOCATION) or default
    if not value:
        raise ValueError(f"no checkpoint location: set --conf {CONF_CHECKPOINT_LOCATION}=<uri> or pass default=")
    return value


def handed_over_starting_offsets(spark: SparkSession) -> str | None:
    """The ``startingOffsets`` JSON the launcher passed (or the standby release), or None."""
    await_handover(spark)
    return _conf(spark, CONF_STARTING_OFFSETS)


def handover_json(spark: SparkSession) -> dict[str, Any] | None:
    """The handover the launcher passed (``spark.ckpt.handoverJson``) as a dict, or None; decoded
    by :class:`~airflow_ckpt_provider.checkpoint.handover.Handover`'s codec
    (:class:`~airflow_ckpt_provider.checkpoint.errors.InvalidHandover`, a ``ValueError``, when
    it is not a handover)."""
    from airflow_ckpt_provider.checkpoint.handover import Handover  # the core, only on this path

    await_handover(spark)
    raw = _conf(spark, CONF_HANDOVER_JSON)
    return Handover.from_json(raw).to_dict() if raw else None


def _topics(topics: str | Iterable[str]) -> list[str]:
    names = [t.strip() for t in ([topics] if isinstance(topics, str) else list(topics))]
    names = [n for part in names for n in part.split(",") if n.strip()]
    if not names:
        raise ValueError("read_kafka needs at least one topic")
    return [n.strip() for n in names]


#: How far back a standby's rehearsal starts reading, and how many records its first batch takes at most.
REHEARSAL_LOOKBACK_MS = 30_000
REHEARSAL_MAX_RECORDS = 500


#: Spark's Kafka option of a job's own consumer group, and the prefix of the groups Spark generates.
GROUP_ID_OPTION = "kafka.group.id"
GROUP_ID_PREFIX_OPTION = "groupIdPrefix"


def warm_up_options(options: dict[str, Any]) -> tuple[dict[str, str], str | None]:
    """The reader options a standby's warm-up (its rehearsal, or its batch read) takes from the
    job's ``read_kafka`` options, and the job's consumer group it leaves out (None: the job names
    none). It takes the ``kafka.*`` options (security, timeouts) and ``groupIdPrefix``, never
    ``kafka.group.id``: the warm-up runs while the old version still reads with that group, and a
    second reader in one group disturbs the first (Spark's Kafka guide); Spark generates the
    warm-up's own group instead, named from the job's ``groupIdPrefix`` when it gives one (a
    broker whose ACLs allow only the job's group then refuses the warm-up, which is logged and
    skipped, never the job). Values become strings as the reader wants them."""
    taken = {key: value if isinstance(value, str) else json.dumps(value) for key, value in options.items()
             if key.startswith("kafka.") or key == GROUP_ID_PREFIX_OPTION}
    group = taken.pop(GROUP_ID_OPTION, None)
    return taken, group


def _warm_up(spark: SparkSession, bootstrap_servers: str, names: list[str], options: dict[str, Any]) -> None:
    """A standby's warm-up, with the job's ``kafka.*`` options and its own consumer group
    (:func:`warm_up_options`): the session's own tiny job, then a rehearsal
    (:func:`~airflow_ckpt_provider.spark.rehearsal.rehearse_query`): a stateful streaming
    query of the topics' last 30 s (at most 500 records) and a read of its state, so the Kafka
    consumers, the micro-batch engine, the state store and the code for Kafka rows are ready at the
    release. With ``spark.ckpt.standbyRehearsal=false``, a bounded batch read of the topics (at
    most 100 records per partition, into Spark's no-op sink) instead."""
    from airflow_ckpt_provider.spark.rehearsal import rehearsal_enabled, rehearse_query

    warm_up_session(spark)
    kafka_options, group = warm_up_options(options)
    if group is not None:  # the old version may be reading with it right now
        log.info("standby warm-up: %s %s not used (Spark's generated group%s instead)", GROUP_ID_OPTION, group,
                 f", prefix {kafka_options[GROUP_ID_PREFIX_OPTION]}" if GROUP_ID_PREFIX_OPTION in kafka_options else "")
    if rehearsal_enabled(spark):
        def recent() -> DataFrame:
            since_ms = int(time.time() * 1000) - REHEARSAL_LOOKBACK_MS
            return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers)
                    .option("subscribe", ",".join(names)).options(**kafka_options)
                    .option("startingTimestamp", str(since_ms)).option("startingOffsetsByTimestampStrategy", "latest")
                    .option("maxOffsetsPerTrigger", str(REHEARSAL_MAX_RECORDS)).option("failOnDataLoss", "false")
                    .load())

        rehearse_query(spark, recent)
        return
    try:
        frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers)
                 .option("subscribe", ",".join(names)).options(**kafka_options).load())
        frame = frame.selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key",
                                 "CAST(value AS STRING) AS value", "timestamp")
        frame.limit(100).write.format("noop").mode("overwrite").save()
    except Exception as exc:  # noqa: BLE001 - a warm-up never fails the job; its query will say what is wrong
        from airflow_ckpt_provider.checkpoint.secrets import redact_text  # the core, only on this path

        log.warning("standby warm-up read of %s failed: %s", ",".join(names), redact_text(str(exc)))


def with_source_header(frame: DataFrame, *, topic: str = "topic", partition: str = "partition",
                       offset: str = "offset") -> DataFrame:
    """``frame`` with a ``headers`` column for Spark's Kafka sink that names each output record's
    input record (header ``ckpt-source``, value ``<topic>:<partition>:<offset>``; see
    :mod:`airflow_ckpt_provider.source_header`), taken from the Kafka source's ``topic``,
    ``partition`` and ``offset`` columns (their names in ``frame``). Any ``headers`` the frame
    already has are kept after it. With it, a batch cut by a stop is counted exactly in the output
    topic: the upgrade report names the records the sink received twice."""
    from pyspark.sql import functions as F

    value = F.encode(F.concat_ws(":", F.col(topic), F.col(partition).cast("string"),
                                 F.col(offset).cast("string")), "UTF-8")
    header = F.array(F.struct(F.lit(SOURCE_HEADER).alias("key"), value.alias("value")))
    if "headers" in frame.columns:
        header = F.concat(header, F.col("headers"))
    return frame.withColumn("headers", header)


def _named(reader: Any, source_name: str, spark: SparkSession) -> Any:
    """``reader.name(source_name)``; ``ValueError`` when this Spark cannot name a source."""
    if not hasattr(reader, "name"):
        raise ValueError(f"source_name={source_name!r}: this driver runs Spark {spark.version}, which cannot name a "
                         "streaming source; expected Spark 4.2 or later (DataStreamReader.name); run the job on "
                         "Spark 4.2+ or drop source_name")
    log.info("Kafka source named %s (source evolution: %s)", source_name,
             spark.conf.get("spark.sql.streaming.queryEvolution.enableSourceEvolution", "false"))
    return reader.name(source_name)


def read_kafka(
    spark: SparkSession,
    *,
    topics: str | Iterable[str],
    bootstrap_servers: str,
    starting_offsets: str | None = None,
    source_name: str | None = None,
    **options: Any,
) -> DataFrame:
    """``spark.readStream`` of Kafka ``topics`` starting where the handover says.

    ``startingOffsets`` precedence: the ``starting_offsets`` argument (or a ``startingOffsets``
    option), then the conf key ``spark.ckpt.startingOffsets``, else Spark's default (latest).
    A handed-over JSON must name exactly the subscribed topics (``ValueError`` otherwise, before
    anything starts). When offsets come from the handover, ``failOnDataLoss`` defaults to true:
    offsets deleted by retention then fail the query instead of silently skipping records.
    Other ``options`` go to the reader as they are (``**{"kafka.security.protocol": "SSL"}``),
    except ``kafka.group.id`` in a trial run (:mod:`.trial`) and in a standby's warm-up
    (:func:`warm_up_options`), which never join the job's consumer group.
    ``source_name`` names the source (``DataStreamReader.name``, Spark 4.2+): with Spark's source
    evolution on (``spark.sql.streaming.queryEvolution.enableSourceEvolution=true`` in the session,
    set before the query is defined) the checkpoint keys the source by that name (offset log v2,
    ``sources/<name>/``). An existing checkpoint without names cannot switch it on, so a job that
    starts naming its source needs a new checkpoint. ``ValueError`` on a Spark without the API.
    In a standby launch it first warms the session up with a bounded batch read of the same
    topics, then waits for the release (:func:`airflow_ckpt_provider.spark.standby.await_handover`):
    call it before :func:`checkpoint_location`, which waits without that warm-up.
    """
    names = _topics(topics)
    # a standby returns from here once released, with the handed-over keys set; while it waits,
    # its session has read a few records of these topics (Kafka consumer, codegen: warm)
    await_handover(spark, warm_up=lambda session: _warm_up(session, bootstrap_servers, names, options))
    explicit = starting_offsets if starting_offsets is not None else options.pop("startingOffsets", None)
    chosen, origin = explicit, "argument"
    if chosen is None:
        chosen, origin = handed_over_starting_offsets(spark), f"conf {CONF_STARTING_OFFSETS}"
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers)
    reader = reader.option("subscribe", ",".join(names))
    if source_name is not None:
        reader = _named(reader, source_name, spark)
    if chosen is not None:
        if chosen.strip().startswith("{"):
            given = sorted(json_limits.loads(chosen, what="startingOffsets"))
            if given != sorted(set(names)):
                raise ValueError(f"startingOffsets from the {origin} name topics {given}, but the job "
                                 f"subscribes to {sorted(set(names))}")
            options.setdefault("failOnDataLoss", "true")
        log.info("Kafka source %s starts at %s (from the %s)", ",".join(names), chosen, origin)
        reader = reader.option("startingOffsets", chosen)
    if is_dry_run(spark) and "kafka.group.id" in options:  # a trial never joins the live job's group
        log.info("trial run: kafka.group.id %s not used (Spark's generated group instead)",
                 options.pop("kafka.group.id"))
    for key, value in options.items():
        reader = reader.option(key, value if isinstance(value, str) else json.dumps(value))
    return reader.load()
