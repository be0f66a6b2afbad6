"""What one version of a stream is launched with: its Spark, its Airflow Spark connection, its extra
conf and jars (pure; no Airflow, no Spark).

A major Spark upgrade runs the old version on the old Spark and the new version on the new one,
so the reference DAG takes one :class:`SparkSettings` per version (params ``old_spark`` and
``new_spark``); the empty object is the DAG's shared settings alone (``spark_master``,
``spark_deploy_mode``, ``spark_conf``), which is how both versions ran before.

* ``spark_home``: the version's Spark (``SPARK_HOME`` of its spark-submit; for a pip-installed
  pyspark the ``pyspark`` package folder); its ``bin/spark-submit`` is used;
* ``spark_submit``: the spark-submit to run, when it is not ``<spark_home>/bin/spark-submit``;
* ``conn_id``: an Airflow Spark connection (master, deploy mode, queue...) for this version
  instead of the shared ``spark_master`` / ``spark_deploy_mode``;
* ``conf``: Spark conf of this version over the shared conf (``spark.jars`` of the version's
  Kafka connector, ``spark.pyspark.python`` of its driver's Python...);
* ``jars``: jars appended to the merged ``spark.jars``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidSparkSettings
from airflow_ckpt_provider.checkpoint.jsonin import load_json

#: The keys of a version's Spark settings object, in the order the docs list them.
KEYS = ("spark_home", "spark_submit", "conn_id", "conf", "jars")
_TEXT_KEYS = ("spark_home", "spark_submit", "conn_id")


@dataclass(frozen=True)
class SparkSettings:
    """One version's Spark settings (see the module doc); build it with :meth:`from_json`."""

    spark_home: str = ""
    spark_submit: str = ""
    conn_id: str = ""
    conf: Mapping[str, str] = field(default_factory=dict)
    jars: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, value: SparkSettings | Mapping[str, Any] | str | None, *,
                  name: str = "Spark settings") -> SparkSettings:
        """Validated settings from a param's value (an object, its JSON, or empty for none).

        Raises :class:`InvalidSparkSettings` naming ``name`` for anything else: not an object,
        unknown keys, a non-string path or connection id, conf that is not an object of scalars,
        jars that are not a list of paths (or hold a comma, which ``spark.jars`` would split)."""
        if isinstance(value, SparkSettings):
            return value
        if value is None or (isinstance(value, str) and not value.strip()):
            return cls()
        if isinstance(value, str):
            try:
                value = load_json(value)
            except ValueError as exc:
                raise InvalidSparkSettings(found=f"{name} that is not JSON ({exc})",
                                           expected=f"an object with keys among {', '.join(KEYS)}") from None
        if not isinstance(value, Mapping):
            raise InvalidSparkSettings(found=f"{name} of type {type(value).__name__}",
                                       expected=f"an object with keys among {', '.join(KEYS)}")
        unknown = sorted(str(k) for k in value if k not in KEYS)
        if unknown:
            raise InvalidSparkSettings(found=f"{name} with unknown key(s) {', '.join(unknown)}",
                                       expected=f"keys among {', '.join(KEYS)}")
        for key in _TEXT_KEYS:
            if not isinstance(value.get(key) or "", str):
                raise InvalidSparkSettings(found=f"{name}.{key} = {value[key]!r}", expected="a string")
        conf = value.get("conf") or {}
        if not isinstance(conf, Mapping) or not all(
                isinstance(v, (str, int, float, bool)) for v in conf.values()):
            raise InvalidSparkSettings(found=f"{name}.conf = {conf!r}",
                                       expected="an object of Spark conf keys and scalar values")
        jars = value.get("jars") or []
        if isinstance(jars, str) or not isinstance(jars, (list, tuple)) or not all(
                isinstance(j, str) and j.strip() and "," not in j for j in jars):
            raise InvalidSparkSettings(found=f"{name}.jars = {jars!r}",
                                       expected="a list of jar paths or URLs, one per item, without commas")
        return cls(spark_home=str(value.get("spark_home") or "").strip(),
                   spark_submit=str(value.get("spark_submit") or "").strip(),
                   conn_id=str(value.get("conn_id") or "").strip(),
                   conf={str(k): str(v) for k, v in conf.items()},
                   jars=tuple(j.strip() for j in jars))

    def merged_conf(self, shared: Mapping[str, Any]) -> dict[str, str]:
        """The shared conf, this version's conf over it, then this version's jars appended to
        ``spark.jars``."""
        conf = {str(k): str(v) for k, v in shared.items()}
        conf.update(self.conf)
        if self.jars:
            listed = [j for j in conf.get("spark.jars", "").split(",") if j.strip()]
            conf["spark.jars"] = ",".join([*listed, *self.jars])
        return conf

    def master(self, shared_master: str) -> str:
        """The ``--master`` to pass: none ("") when this version has its own connection (the
        connection's master then applies), else the shared one."""
        return "" if self.conn_id else shared_master

    def to_dict(self) -> dict[str, Any]:
        return {"spark_home": self.spark_home, "spark_submit": self.spark_submit, "conn_id": self.conn_id,
                "conf": dict(self.conf), "jars": list(self.jars)}

