"""get_provider_info() is valid for Airflow and names only modules and classes that exist."""

from __future__ import annotations

import importlib
import json
from importlib import metadata
from pathlib import Path

import airflow
import jsonschema

import airflow_ckpt_provider
from airflow_ckpt_provider import get_provider_info


def test_matches_airflow_schema() -> None:
    schema_file = Path(airflow.__file__).parent / "provider_info.schema.json"
    jsonschema.validate(get_provider_info(), json.loads(schema_file.read_text()))


def test_package_name_is_the_distribution_name() -> None:
    assert get_provider_info()["package-name"] == metadata.metadata("airflow-ckpt-provider")["Name"]
    assert metadata.version("airflow-ckpt-provider") == airflow_ckpt_provider.__version__


def test_entry_point_is_registered() -> None:
    points = metadata.entry_points(group="apache_airflow_provider")
    ours = [p for p in points if p.value == "airflow_ckpt_provider:get_provider_info"]
    assert len(ours) == 1 and ours[0].load() is get_provider_info


def test_listed_modules_and_hooks_import() -> None:
    info = get_provider_info()
    for group in ("hooks", "operators", "triggers"):
        for entry in info[group]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for link in info["extra-links"]:
        module, _, name = link.rpartition(".")
        assert getattr(importlib.import_module(module), name)
    for conn in info["connection-types"]:
        module, _, name = conn["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), name)
        assert hook.conn_type == conn["connection-type"]


def test_every_hook_operator_and_trigger_module_is_listed() -> None:
    """Airflow's providers list and docs show what get_provider_info names: a module of hooks/,
    operators/ or triggers/ that defines a hook, an operator or a trigger and is left out of it is
    invisible there (helper modules beside them, defining none, need not be listed)."""
    import inspect

    from airflow.sdk import BaseHook, BaseOperator
    from airflow.triggers.base import BaseTrigger

    info = get_provider_info()
    root = Path(airflow_ckpt_provider.__file__).parent
    for group, base in (("hooks", BaseHook), ("operators", BaseOperator), ("triggers", BaseTrigger)):
        listed = {module for entry in info[group] for module in entry["python-modules"]}
        present = set()
        for path in (root / group).glob("*.py"):
            module = importlib.import_module(f"airflow_ckpt_provider.{group}.{path.stem}")
            if any(issubclass(cls, base) and cls.__module__ == module.__name__
                   for _, cls in inspect.getmembers(module, inspect.isclass)):
                present.add(module.__name__)
        assert present <= listed, f"{group}: not listed {sorted(present - listed)}"
