"""The test and demo harness: real servers for the tests (Airflow standalone, Spark standalone,
S3, HDFS), the upgrade demo and the state audit that prove it (``make demo`` runs
``python -m tests.harness.demo``).

It lives in the checkout, not in the wheel: import it from the repository root (``tests`` is a
package there), or with the checkout on ``PYTHONPATH``. What a user of the installed package needs
stays in ``airflow_ckpt_provider.local``: ``ckpt dev-stack``'s broker, ``ckpt run``'s Spark conf,
the Maven fetch, the local Airflow home (:mod:`~airflow_ckpt_provider.local.airflow_home`) and the
sink audit (:mod:`~airflow_ckpt_provider.local.audit`, ``ckpt audit``); the stored reports are read
by :mod:`airflow_ckpt_provider.storage.reports` (``ckpt report``).
"""
