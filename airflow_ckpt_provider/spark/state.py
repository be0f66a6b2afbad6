"""Start from the old query's state, inside the new version's driver (imports only pyspark and the
stdlib).

Spark never carries state to a new checkpoint. When the upgrade exported the old query's state
(``StateExportOperator``, ``ckpt export-state``), the launcher gives the new version its location
as ``spark.ckpt.initialStatePath`` (a standby: with its release). That folder holds
``state-manifest.json`` and, per operator and store, Parquet with the ``statestore`` reader's
columns ``key``, ``value``, ``partition_id`` as of the handover batch N. Two documented ways to
start from it::

    from airflow_ckpt_provider.spark.state import aggregate_seed_stream, initial_state_for

    # 1. sums / counts / min / max on the built-in aggregation (HDFS-backed or RocksDB store):
    #    union the exported totals, as a stream, with the Kafka rows shaped the same way, and
    #    aggregate with sum() of the totals and of the counts
    AGGREGATES = [("total", "sum"), ("n", "count")]          # v1: sum(amount), count(*), in order
    purchases = kafka_rows.select("customer", F.col("amount").alias("total"), F.lit(1).alias("n"))
    seed = aggregate_seed_stream(spark, AGGREGATES, key=["customer"])   # None: nothing to carry
    rows = purchases.unionByName(seed) if seed is not None else purchases
    totals = rows.groupBy("customer").agg(F.sum("total").alias("total"), F.sum("n").alias("n"))

    # 2. transformWithStateInPandas (RocksDB store): the seed of initialState=
    seed = initial_state_for(spark, AGGREGATES, key=["customer"])
    frame.groupBy("customer").transformWithStateInPandas(
        processor, schema, "Update", "None", initialState=seed.groupBy("customer"))

``aggregate_state`` maps Spark's aggregate buffers (the exported ``value`` struct, positional:
``sum(x), count(*), min(x), max(x), avg(x)`` -> ``sum, count, min, max, sum, count``) to user
columns where that is well defined (sum, count, min, max; avg as sum and count) and refuses the
rest (:class:`StateMappingError`). The seed source stays in the query for good (an empty stream
once read) and carried keys are emitted again in batch 0. :func:`state_watermark_ms` is the
event-time watermark the old query had reached; a new query starts at 0 (no API sets it), so a
job that must not accept records the old one would have dropped filters by it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.records.control import CONF_INITIAL_STATE_PATH
from airflow_ckpt_provider.spark.standby import await_handover

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

MANIFEST = "state-manifest.json"
#: the aggregate functions whose buffers map to user values, and their buffer fields in order
BUFFERS: dict[str, tuple[str, ...]] = {"sum": ("sum",), "count": ("count",), "min": ("min",), "max": ("max",),
                                       "avg": ("sum", "count")}

__all__ = ["BUFFERS", "CONF_INITIAL_STATE_PATH", "StateMappingError", "StateNotExported", "aggregate_seed_stream",
           "aggregate_state", "initial_state", "initial_state_for", "initial_state_path", "read_state_manifest",
           "state_watermark_ms"]


class StateNotExported(ValueError):
    """No export where one was expected (or not the store asked for)."""


class StateMappingError(ValueError):
    """The exported aggregate buffers do not match the aggregations the job lists."""


def initial_state_path(spark: SparkSession) -> str | None:
    """The export's location (``spark.ckpt.initialStatePath``), None when the upgrade carries no
    state. A standby waits for its release first."""
    await_handover(spark)
    value = spark.conf.get(CONF_INITIAL_STATE_PATH, None)
    return value or None


def read_state_manifest(spark: SparkSession, path: str | None = None) -> dict[str, Any]:
    """The export's ``state-manifest.json`` (read through the session's Hadoop FileSystem: any
    store Spark reads, without a Spark job), decoded by
    :class:`~airflow_ckpt_provider.checkpoint.state.StateManifest`'s codec, as its dict with the
    export's ``location``; :class:`StateNotExported` when there is no export,
    :class:`~airflow_ckpt_provider.checkpoint.errors.StateExportCorrupt` (naming the file) when the
    manifest is not one."""
    root = path or initial_state_path(spark)
    if not root:
        raise StateNotExported(f"found no {CONF_INITIAL_STATE_PATH} and no path; expected the location of a state "
                               "export. The upgrade carried no state (a stateless old query, or carry_state off): "
                               "start empty, or export it with `ckpt export-state` and pass the path.")
    from airflow_ckpt_provider.checkpoint.state import StateManifest  # the core, only on this path
    from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles

    try:
        data = HadoopFiles(spark, root).read(MANIFEST)
    except Exception as exc:  # noqa: BLE001 - py4j wraps the file system's errors
        data, found = None, f"an unreadable {MANIFEST} ({type(exc).__name__})"
    else:
        found = f"no {MANIFEST}"
    if data is None:
        raise StateNotExported(f"found {found} under {root}; expected a complete, verified export (its manifest "
                               "is written last). Run the export again.")
    manifest = StateManifest.from_json(data, where=f"{root.rstrip('/')}/{MANIFEST}").to_dict()
    manifest["location"] = root.rstrip("/")
    return manifest


def _store(manifest: dict[str, Any], operator: int, store: str) -> dict[str, Any]:
    for entry in manifest["stores"]:
        if int(entry["operator_id"]) == operator and store in (entry["store_name"], entry.get("state_variable")):
            return entry
    exported = ", ".join(f"{e['operator_id']}/{e.get('state_variable') or e['store_name']}" for e in manifest["stores"])
    raise StateNotExported(f"found no store {operator}/{store} in the export at {manifest['location']}; expected one "
                           f"of {exported or 'none (nothing was exported)'}. Pass operator= and store= of one of them.")


def _stored_schema(entry: dict[str, Any]) -> Any:
    """The Parquet schema of a store: the reader's, with void fields as boolean and repeated names renamed."""
    from pyspark.sql.types import BooleanType, IntegerType, NullType, StructField, StructType

    def storable(data_type: Any) -> Any:
        if isinstance(data_type, NullType):
            return BooleanType()
        if isinstance(data_type, StructType):
            names = [f.name for f in data_type.fields]
            return StructType([StructField(f.name if names.index(f.name) == i else f"{f.name}_{i}",
                                           storable(f.dataType), True) for i, f in enumerate(data_type.fields)])
        return data_type

    key = storable(StructType.fromJson(entry["key_schema"]))
    value = storable(StructType.fromJson(entry["value_schema"]))
    return StructType([StructField("key", key), StructField("value", value),
                       StructField("partition_id", IntegerType())])


def initial_state(spark: SparkSession, operator: int = 0, store: str = "default", path: str | None = None) -> DataFrame:
    """The exported rows of one store (``key``, ``value``, ``partition_id`` as stored: see the
    module doc); an empty store gives an empty DataFrame of the same schema."""
    manifest = read_state_manifest(spark, path)
    entry = _store(manifest, operator, store)
    schema = _stored_schema(entry)
    if not entry.get("rows"):  # a seed lists no files, only rows: none means an empty store either way
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(f"{manifest['location']}/{entry['path']}")


def _mapping(entry: dict[str, Any], aggregates: Sequence[tuple[str, str]]) -> list[tuple[str, str, list[int]]]:
    """(column, function, value field positions) per aggregate; :class:`StateMappingError` when the
    buffers do not match."""
    fields = [(f["name"], f["type"]) for f in entry["value_schema"].get("fields", [])]
    mapped: list[tuple[str, str, list[int]]] = []
    position = 0
    for column, function in aggregates:
        if function not in BUFFERS:
            raise StateMappingError(
                f"found aggregate {function!r} for column {column!r}; expected one of {', '.join(BUFFERS)}, whose "
                "buffers are well-defined user values. Other aggregates (collect_list/collect_set, "
                "approx_count_distinct and other sketches, first/last, percentiles) keep internal buffers that "
                "cannot be continued: recompute them from a rewind, or read initial_state() yourself.")
        positions = []
        for name in BUFFERS[function]:
            if position >= len(fields) or fields[position][0] != name:
                found = ", ".join(n for n, _ in fields)
                raise StateMappingError(
                    f"found value buffers ({found}) in operator {entry['operator_id']} store {entry['store_name']}; "
                    f"expected {name!r} at position {position} for {function}({column}) — list the old version's "
                    "aggregations in the order of its agg(...) call.")
            positions.append(position)
            position += 1
            if function == "sum" and position < len(fields) and fields[position][0] == "isEmpty":
                position += 1  # a decimal sum's second buffer
        mapped.append((column, function, positions))
    if position != len(fields):
        raise StateMappingError(
            f"found {len(fields)} value buffers ({', '.join(n for n, _ in fields)}); the listed aggregates use "
            f"{position}. List every aggregation of the old version, in order.")
    return mapped


def _aggregate_columns(frame: DataFrame, entry: dict[str, Any], aggregates: Sequence[tuple[str, str]],
                       key: Sequence[str] | None) -> list[Column]:
    from pyspark.sql import functions as F

    stored = [f.name for f in frame.schema["value"].dataType.fields]  # type: ignore[attr-defined]
    key_fields = [f["name"] for f in entry["key_schema"].get("fields", [])]
    names = list(key) if key else key_fields
    if len(names) != len(key_fields):
        raise StateMappingError(f"found key fields {key_fields} in the export; expected {len(names)} names in key=")
    columns = [F.col(f"key.{src}").alias(dst) for src, dst in zip(key_fields, names, strict=True)]
    for column, function, positions in _mapping(entry, aggregates):
        parts = [F.col(f"value.`{stored[p]}`") for p in positions]
        if function == "avg":
            columns += [(parts[0] / parts[1]).alias(column), parts[0].alias(f"{column}_sum"),
                        parts[1].alias(f"{column}_count")]
        else:
            columns.append(parts[0].alias(column))
    return columns


def aggregate_state(spark: SparkSession, aggregates: Sequence[tuple[str, str]], operator: int = 0,
                    store: str = "default", key: Sequence[str] | None = None, path: str | None = None) -> DataFrame:
    """A streaming aggregation's exported state as user columns: the key fields (renamed to
    ``key`` when given) and one column per ``(name, function)`` of ``aggregates`` — the old
    version's aggregations in order; ``avg`` adds ``<name>_sum`` and ``<name>_count``."""
    manifest = read_state_manifest(spark, path)
    entry = _store(manifest, operator, store)
    frame = initial_state(spark, operator, store, path=manifest["location"])
    return frame.select(*_aggregate_columns(frame, entry, aggregates, key))


def initial_state_for(spark: SparkSession, aggregates: Sequence[tuple[str, str]], operator: int = 0,
                      store: str = "default", key: Sequence[str] | None = None,
                      path: str | None = None) -> DataFrame:
    """The seed for ``transformWithStateInPandas(..., initialState=seed.groupBy(key))``: the
    aggregate state as user columns (see :func:`aggregate_state`); the processor's
    ``handleInitialState(key, rows, timer_values)`` receives each key's row."""
    return aggregate_state(spark, aggregates, operator, store, key, path)


def aggregate_seed_stream(spark: SparkSession, aggregates: Sequence[tuple[str, str]], operator: int = 0,
                          store: str = "default", key: Sequence[str] | None = None,
                          path: str | None = None) -> DataFrame | None:
    """The aggregate state as a STREAM of user columns (see :func:`aggregate_state`), to union
    with the new version's input shaped the same way; None when the upgrade carried no state
    (the job then runs without the union). The job aggregates the union with ``sum`` for sums and
    counts (a count becomes a weight column), ``min``/``max`` as they are."""
    root = path or initial_state_path(spark)
    if not root:
        return None
    manifest = read_state_manifest(spark, root)
    entry = _store(manifest, operator, store)
    schema = _stored_schema(entry)
    stream = spark.readStream.schema(schema).parquet(f"{manifest['location']}/{entry['path']}")
    return stream.select(*_aggregate_columns(stream, entry, aggregates, key))


def state_watermark_ms(spark: SparkSession, path: str | None = None) -> int | None:
    """The event-time watermark (ms) the old query had reached after the handover batch; None
    without an export."""
    root = path or initial_state_path(spark)
    if not root:
        return None
    return int(read_state_manifest(spark, root).get("next_batch_watermark_ms") or 0)
