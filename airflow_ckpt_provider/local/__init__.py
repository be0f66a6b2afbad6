"""The embedded local stack the product's command line and Makefile use: the Maven fetch of the
JVM artifacts (:mod:`.jvm`, ``make jvm``), the single-node Kafka broker of ``ckpt dev-stack``
(:mod:`.kafka`), the local Spark conf of ``ckpt run`` / ``ckpt launch`` and the extra Spark
virtualenvs (:mod:`.spark`), and their process helpers (:mod:`.processes`).

The test and demo harness built on it (the upgrade demo, audits, Airflow and Spark standalone
servers, S3 and HDFS servers) is in ``tests/harness/`` of the repository and is not shipped.
"""
