"""The embedded local stack the product's command line and Makefile use: the Maven fetch of the
JVM artifacts (:mod:`.jvm`, ``make jvm``), the single-node Kafka broker of ``ckpt dev-stack``
(:mod:`.kafka`), the local Spark conf of ``ckpt run`` / ``ckpt launch`` and the extra Spark
virtualenvs (:mod:`.spark`), their process helpers (:mod:`.processes`), a local SQLite Airflow home
for ``dag.test()`` runs (:mod:`.airflow_home`) and the audit of a sink against its Kafka topics
(:mod:`.audit`, ``ckpt audit``).

The test and demo harness built on it (the upgrade demo, the state audit, Airflow and Spark
standalone servers, S3 and HDFS servers) is in ``tests/harness/`` of the repository and is not
shipped.
"""
