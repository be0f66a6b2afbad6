"""Versioned strict records: the one codec every value the provider persists or exchanges decodes
through (:mod:`airflow_ckpt_provider.records.codec`). The layer below everything: standard library
only, so the pure core, the upgrade record, the storage layer and the driver side (``spark/``, in the
user's Spark driver, without Airflow) all use it. This file only documents."""
