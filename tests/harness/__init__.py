"""The test and demo harness: real servers for the tests (Airflow standalone, Spark standalone,
S3, HDFS), the upgrade demo and the audits that prove it (``make demo`` runs
``python -m tests.harness.demo``).

It lives in the checkout, not in the wheel: import it from the repository root (``tests`` is a
package there), or with the checkout on ``PYTHONPATH``. What the product's own command line needs
(``ckpt dev-stack``'s broker, ``ckpt run``'s Spark conf, the Maven fetch) stays in
``airflow_ckpt_provider.local``.
"""
