"""The upgrade as recorded state (no Airflow, no fsspec): today the one codec of every value the
provider persists or exchanges (:mod:`airflow_ckpt_provider.upgrade.codec`); the upgrade record,
its planner and the step table follow (issue 30). ``tests/unit/test_upgrade_imports.py`` keeps
this package free of Airflow, fsspec and the Airflow ring."""
