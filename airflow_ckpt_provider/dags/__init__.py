"""The DAG factories of the provider: the reference upgrade DAG generated from the step table.

A DAG file of your own (in Airflow's DAGs folder) needs two lines::

    from airflow_ckpt_provider.dags import build_stream_upgrade_dag

    dag = build_stream_upgrade_dag("stream_upgrade")

:data:`PARAMS` are its trigger form's params (``defaults=`` changes their defaults); see
:func:`build_stream_upgrade_dag` for the rest.
"""

from airflow_ckpt_provider.dags.stream_upgrade import (
    PARAMS,
    ReferenceDags,
    build_reference_dags,
    build_stream_upgrade_dag,
)

__all__ = ["PARAMS", "ReferenceDags", "build_reference_dags", "build_stream_upgrade_dag"]
