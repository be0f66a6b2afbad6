"""The Spark job that reads a stopped checkpoint's state and writes it as Parquet (imports only
pyspark and the stdlib; submitted by :class:`~airflow_ckpt_provider.operators.state.StateExportOperator`
and ``ckpt export-state`` / ``ckpt state``).

It never chooses the batch: the caller checked in the commit log that ``--batch`` is committed
(Spark's state reader would return an uncommitted batch's state as readily). For every row of
``state-metadata`` (one per operator and store; a transformWithState operator: one per state
variable) it reads ``statestore`` at ``batchId`` and writes the reader's own columns (``key``,
``value``, ``partition_id``) to ``<target>/state/<operator>/<store>/``, counting the rows it
reads with an observed metric (no second pass). What Parquet cannot hold is stored differently
and listed: NullType fields (a deduplication's ``value.__dummy__``) as boolean nulls, a field
name repeated within a struct (aggregate buffers: ``sum`` of sum() and of avg()) with its
position as a suffix (``sum_4``). Then it
writes ``<target>/_job/result.json`` (schemas, rows and checksum per store, Spark version) for the caller to
check the files against. With ``--list`` it only counts, and writes the same result without
Parquet::

    spark-submit state_export.py --checkpoint CKPT --batch N --target E [--list] [--result URI]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_ckpt_provider.checkpoint.state import StateJobResult

log = logging.getLogger("ckpt.state_export")

RESULT = "_job/result.json"


def _void_paths(data_type: Any, prefix: str) -> list[str]:
    from pyspark.sql.types import NullType, StructType

    if isinstance(data_type, NullType):
        return [prefix]
    if isinstance(data_type, StructType):
        return [p for f in data_type.fields for p in _void_paths(f.dataType, f"{prefix}.{f.name}")]
    return []


def _storable(data_type: Any, prefix: str = "", renamed: dict[str, str] | None = None) -> Any:
    """``data_type`` as Parquet can hold it: every NullType (at any depth of structs) becomes
    BooleanType, and a field name repeated in one struct (Spark's aggregate buffers: ``sum``,
    ``count`` of sum() and avg()) gets its position as a suffix (``sum_4``), noted in ``renamed``
    (stored path -> original path)."""
    from pyspark.sql.types import BooleanType, NullType, StructField, StructType

    if isinstance(data_type, NullType):
        return BooleanType()
    if isinstance(data_type, StructType):
        names = [f.name for f in data_type.fields]
        fields = []
        for index, f in enumerate(data_type.fields):
            name = f.name if names.count(f.name) == 1 or names.index(f.name) == index else f"{f.name}_{index}"
            if name != f.name and renamed is not None:
                renamed[f"{prefix}.{name}"] = f"{prefix}.{f.name}"
            fields.append(StructField(name, _storable(f.dataType, f"{prefix}.{name}", renamed), f.nullable,
                                      f.metadata))
        return StructType(fields)
    return data_type


def _state_variables(properties: str | None) -> list[str]:
    """The state variable names of a transformWithState operator (``operatorProperties`` JSON)."""
    if not properties:
        return []
    try:
        parsed = json.loads(properties)
    except (ValueError, RecursionError):  # a standalone script: no provider import for json_limits
        return []
    variables = parsed.get("stateVariables") if isinstance(parsed, dict) else None
    return [str(v.get("stateName")) for v in variables or [] if isinstance(v, dict) and v.get("stateName")]


def export_state(spark: Any, checkpoint: str, batch_id: int, target: str, *, list_only: bool = False,
                 extra_stores: list[tuple[int, str]] | None = None) -> StateJobResult:
    """Read every store's state after ``batch_id`` and (unless ``list_only``) write it under
    ``target``; returns the result (see the module doc:
    :class:`~airflow_ckpt_provider.checkpoint.state.StateJobResult`). ``extra_stores`` adds (operator, store name)
    pairs of operators ``state-metadata`` does not list (no operator metadata: Spark 3.5). Spark's
    own errors propagate."""
    from pyspark.sql import Observation, Row
    from pyspark.sql import functions as F

    from airflow_ckpt_provider.checkpoint.state import StateJobResult

    newer_reader = _spark_version(spark) >= (4, 2)
    if newer_reader:  # 4.2's state reader loads stores through the StateStoreCoordinator of spark.streams
        spark.streams.active  # noqa: B018 - creating the streaming query manager starts the coordinator
    metadata = spark.read.format("state-metadata").load(checkpoint).collect()
    listed = {int(r.operatorId) for r in metadata}
    metadata += [Row(operatorId=op, operatorName="(no operator metadata)", stateStoreName=name, numPartitions=0,
                     minBatchId=None, maxBatchId=None, operatorProperties=None)
                 for op, name in extra_stores or [] if op not in listed]
    stores: list[dict[str, Any]] = []
    seen: set[tuple[int, str]] = set()
    for row in sorted(metadata, key=lambda r: (r.operatorId, r.stateStoreName)):
        operator, store = int(row.operatorId), str(row.stateStoreName)
        variables: list[str | None] = list(_state_variables(row.operatorProperties))
        for variable in variables or [None]:
            name = variable or store
            if (operator, name) in seen:
                continue
            seen.add((operator, name))
            if newer_reader and row.numPartitions:
                # 4.2's reader wants the operator's partition count from the offset log, where Spark
                # 4.2 does not record it: the session's value is its fallback
                spark.conf.set(STATE_PARTITIONS_CONF, str(int(row.numPartitions)))
            reader = (spark.read.format("statestore").option("batchId", batch_id).option("operatorId", operator))
            reader = reader.option("stateVarName", variable) if variable else reader.option("storeName", store)
            frame = reader.load(checkpoint)
            key_type, value_type = frame.schema["key"].dataType, frame.schema["value"].dataType
            void = _void_paths(key_type, "key") + _void_paths(value_type, "value")
            renamed: dict[str, str] = {}
            stored_key, stored_value = _storable(key_type, "key", renamed), _storable(value_type, "value", renamed)
            if void or renamed:  # a struct cast is positional
                frame = frame.select(F.col("key").cast(stored_key).alias("key"),
                                     F.col("value").cast(stored_value).alias("value"), "partition_id")
            path = f"state/{operator}/{name}"
            started = time.monotonic()
            measures = (F.count(F.lit(1)).alias("rows"), checksum_column().alias("checksum"))
            if list_only:
                measured = frame.agg(*measures).first()
            else:
                observation = Observation(f"ckpt_rows_{operator}_{len(seen)}")
                # one file per state partition would be hundreds of small files (200 by default):
                # as many as the cores write in parallel instead (no shuffle)
                counted = frame.coalesce(max(1, spark.sparkContext.defaultParallelism)).observe(observation, *measures)
                counted.write.mode("overwrite").parquet(f"{target.rstrip('/')}/{path}")
                measured = observation.get
            rows, checksum = int(measured["rows"]), str(measured["checksum"] or 0)
            log.info("operator %s (%s) store %s: %s rows %s in %.1f s", operator, row.operatorName, name,
                     f"{rows:,}", "counted" if list_only else "exported", time.monotonic() - started)
            stores.append({
                "operator_id": operator, "operator_name": str(row.operatorName), "store_name": store,
                "state_variable": variable, "path": path, "num_partitions": int(row.numPartitions or 0),
                "key_schema": key_type.jsonValue(), "value_schema": value_type.jsonValue(), "void_fields": void,
                "renamed_fields": renamed, "rows": rows, "checksum": checksum, "min_batch_id": row.minBatchId,
                "max_batch_id": row.maxBatchId,
            })
    return StateJobResult(batch_id=batch_id, checkpoint=checkpoint, spark_version=str(spark.version),
                          stores=tuple(stores), listed_only=list_only)


def checksum_column() -> Any:
    """The aggregate of a store's checksum: the sum, as an exact decimal, of every row's
    ``xxhash64(key, value)``. Order-free, so the same state gives the same sum however it is
    partitioned or read; Spark hashes struct fields by position and skips nulls, so the stored
    form (void fields as boolean nulls, repeated names renamed) hashes as the reader's rows do."""
    from pyspark.sql import functions as F

    return F.sum(F.xxhash64("key", "value").cast("decimal(38,0)"))


#: Spark's first release whose state reader reads RocksDB state checkpoint format v2.
FORMAT_V2_READER = (4, 1)
#: The state partition count Spark 4.2's state reader looks up (offset log, else the session).
STATE_PARTITIONS_CONF = "spark.sql.streaming.internal.stateStore.partitions"


def _spark_version(spark: Any) -> tuple[int, int]:
    major, minor = (int(part) for part in str(spark.version).split(".")[:2])
    return major, minor


def use_checkpoint_format(spark: Any, version: int) -> None:
    """Read state checkpoint format ``version`` (2: the state files carry unique ids, which the
    reader takes from the commit log): set it on this session, or raise ``RuntimeError`` naming
    the Spark that reads it when this one is older."""
    if _spark_version(spark) < FORMAT_V2_READER:
        raise RuntimeError(f"state checkpoint format v{version} is read by Spark 4.1.0 or later; this job runs on "
                           f"Spark {spark.version}: run the export on the new version's Spark")
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", str(version))
    log.info("reading state checkpoint format v%d on Spark %s", version, spark.version)


def write_result(spark: Any, uri: str, result: StateJobResult) -> None:
    """Write the result JSON (with its format number) through Hadoop's FileSystem (any store Spark writes to)."""
    from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles

    parent, _, name = uri.rstrip("/").rpartition("/")
    HadoopFiles(spark, parent).write(name, result.to_json().encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Export a stopped checkpoint's state as Parquet")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--target", required=True, help="export root; the Parquet goes to <target>/state/...")
    parser.add_argument("--result", default="", help=f"where the result JSON goes (default <target>/{RESULT})")
    parser.add_argument("--list", action="store_true", help="count rows only, write no Parquet")
    parser.add_argument("--checkpoint-format", type=int, default=1,
                        help="2: the state is RocksDB checkpoint format v2 (read by Spark 4.1 or later)")
    parser.add_argument("--store", action="append", default=[], metavar="OPERATOR:NAME",
                        help="a store of an operator without metadata (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("ckpt-state-export").getOrCreate()
    try:
        if args.checkpoint_format >= 2:
            use_checkpoint_format(spark, args.checkpoint_format)
        stores = [(int(op), name) for op, _, name in (s.partition(":") for s in args.store)]
        result = export_state(spark, args.checkpoint, args.batch, args.target, list_only=args.list,
                              extra_stores=stores)
        write_result(spark, args.result or f"{args.target.rstrip('/')}/{RESULT}", result)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
