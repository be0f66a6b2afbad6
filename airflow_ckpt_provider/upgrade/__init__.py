"""The upgrade as recorded state (no Airflow, no fsspec, nothing of the storage layer): the upgrade
record (:mod:`airflow_ckpt_provider.upgrade.record`, what the journal holds and its rules, decoded
by the one codec below the core, :mod:`airflow_ckpt_provider.records.codec`), the steps' typed
results, the step table, the planner over the record and what the steps read from it
(:mod:`airflow_ckpt_provider.upgrade.inputs`) (issue 30). The storage layer reads and writes the
record (:mod:`airflow_ckpt_provider.storage.journal`). ``tests/unit/test_upgrade_imports.py`` and
``tests/unit/test_architecture.py`` keep this package free of Airflow, fsspec, the storage layer and
the Airflow ring."""
