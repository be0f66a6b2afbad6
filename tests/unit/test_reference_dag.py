"""dags/stream_upgrade.py parses cleanly and is wired from the step table: no branch task, every
step after the approval in its path's order, each rollback after its path. What runs is decided by
each step from the journal (tests/unit/test_planner.py), not by the wiring."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ckpt_provider.upgrade.inputs import FromRecord, RecordInput

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "stream_upgrade.py"


@pytest.fixture(scope="module")
def dags() -> dict:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.dags


def test_manual_and_asset_triggered_variants(dags: dict) -> None:
    from airflow.sdk.definitions.timetables.assets import AssetTriggeredTimetable
    from airflow.sdk.definitions.timetables.simple import NullTimetable

    manual, on_artifact = dags["stream_upgrade"], dags["stream_upgrade_on_artifact"]
    assert isinstance(manual.timetable, NullTimetable)
    assert isinstance(on_artifact.timetable, AssetTriggeredTimetable)
    assert manual.params["require_approval"] is True
    assert on_artifact.params["require_approval"] is False  # scheduled runs cannot wait for a person
    assert manual.max_active_runs == 1


@pytest.mark.parametrize(("dag_id", "chain"), [
    ("stream_upgrade", ["preflight", "compatibility_check", "choose_path", "approve",
                        "start_standby", "graceful_stop", "extract_handover", "export_state", "relaunch", "verify",
                        "archive"]),
    ("stream_upgrade_cold", ["preflight", "compatibility_check", "choose_path", "approve",
                             "graceful_stop", "extract_handover", "export_state", "archive", "relaunch", "verify"]),
])
def test_upgrade_chain_and_rollback_wiring(dags: dict, dag_id: str, chain: list[str]) -> None:
    from airflow.sdk.bases.skipmixin import SkipMixin

    from airflow_ckpt_provider.upgrade.steps import PATHS, ROLLBACK, Path

    dag = dags[dag_id]
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        assert downstream in dag.get_task(upstream).downstream_task_ids, (upstream, downstream)
    assert tuple(chain[4:]) == PATHS[Path.COLD if dag_id.endswith("_cold") else Path.STANDBY].steps
    # no branch: a "Reject" skips the approval's children, the first step of each path
    assert dag.get_task("approve").downstream_task_ids == {chain[4], "in_place_stop"}
    branches = [t.task_id for t in dag.tasks if isinstance(t, SkipMixin) and t.task_id != "approve"]
    assert branches == [], "every step decides for itself: no branch task"
    # the rollback after the path's last step, in the table's order, each run once its predecessor ended
    rollback = [chain[-1], *ROLLBACK, "report"]
    for upstream, downstream in zip(rollback, rollback[1:], strict=False):
        assert downstream in dag.get_task(upstream).downstream_task_ids, (upstream, downstream)
    assert {name: dag.get_task(name).trigger_rule for name in ROLLBACK} == dict.fromkeys(ROLLBACK, "all_done")
    assert all(dag.get_task(name).journal_phase == "rollback" for name in ROLLBACK)
    assert dag.get_task("rollback_restart_old").allow_existing_checkpoint is True
    assert dag.get_task("rollback_restart_forward").allow_existing_checkpoint is False
    # a step of an upgrade never runs without its journal (a failed preflight: the rollback skips)
    assert all(dag.get_task(name).require_journal for name in (*chain[4:], *ROLLBACK))
    # the steps whose deferral can race Airflow's LocalExecutor retry once (journaled: no second side effect)
    assert all(dag.get_task(t).retries == 1 for t in ("graceful_stop", "relaunch", "verify")), dag_id
    report = dag.get_task("report")
    assert report.trigger_rule == "all_done"
    assert report.upstream_task_ids == {"rollback_restart_forward", "in_place_rollback_restart"}, "after both rollbacks"


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold", "stream_upgrade_on_artifact"])
def test_rollback_mode_param_and_its_steps(dags: dict, dag_id: str) -> None:
    from airflow_ckpt_provider.operators.handover import RollbackHandoverOperator

    dag = dags[dag_id]
    assert dag.params["rollback_mode"] == "restore", "today's rollback stays the default"
    assert dag.params.get_param("rollback_mode").schema["enum"] == ["restore", "forward"]
    assert dag.params["rollback_checkpoint"] == ""
    step = dag.get_task("rollback_handover")
    assert isinstance(step, RollbackHandoverOperator) and step.journal_phase == "rollback"
    assert step.handover == FromRecord(RecordInput.HANDOVER) and "rollback_mode" in step.rollback_mode
    forward = dag.get_task("rollback_restart_forward")
    assert forward.journal_phase == "rollback"
    assert forward.starting_offsets == FromRecord(RecordInput.ROLLBACK_STARTING_OFFSETS)
    assert forward.checkpoint_uri == step.rollback_checkpoint_uri == FromRecord(RecordInput.ROLLBACK_CHECKPOINT), \
        "one location, the one the preflight recorded"
    assert "params.rollback_checkpoint" in dag.get_task("preflight").rollback_checkpoint_uri
    assert "params.old_application" in forward.application
    assert "params.rollback_mode" in dag.get_task("preflight").rollback_mode
    report = dag.get_task("report")
    assert report.path.restarts == ("rollback_restart_old", "rollback_restart_forward")
    assert report.path.rollback_handover == "rollback_handover" and report.path.restore == ("rollback_restore",)
    named = {*report.path.steps, *report.path.restarts, *report.path.restore, report.path.rollback_handover}
    assert named <= set(dag.task_ids), "the step table names this DAG's tasks"


def test_standby_dag_launches_a_standby_and_releases_it(dags: dict) -> None:
    from airflow_ckpt_provider.operators.launch import StandbyReleaseOperator, StreamLaunchOperator

    dag = dags["stream_upgrade"]
    standby, relaunch = dag.get_task("start_standby"), dag.get_task("relaunch")
    assert isinstance(standby, StreamLaunchOperator) and standby.standby is True
    assert isinstance(relaunch, StandbyReleaseOperator) and relaunch.standby is False
    assert "start_standby" in relaunch.get_flat_relative_ids(upstream=True)  # after the standby launch
    assert relaunch.standby_handle == FromRecord(RecordInput.STANDBY_HANDLE)  # whose handle it recorded
    cold = dags["stream_upgrade_cold"].get_task("relaunch")
    assert type(cold) is StreamLaunchOperator and cold.standby is False
    assert "start_standby" not in dags["stream_upgrade_cold"].task_ids
    assert dags["stream_upgrade_on_artifact"].has_task("start_standby")


def test_approval_shows_the_preflight_summary_and_rejects_without_answer(dags: dict) -> None:
    approve = dags["stream_upgrade"].get_task("approve")
    assert approve.body is None, "the approver reads the decisions' summaries from the journal, not from XCom"
    assert approve.journal == dags["stream_upgrade"].get_task("graceful_stop").journal, "the one journal every step reads"
    assert approve.defaults == ["Reject"]


def test_plan_refuses_empty_required_and_unknown_params(dags: dict) -> None:
    plan = dags["stream_upgrade"].get_task("plan").python_callable
    params = {name: p.value if hasattr(p, "value") else p for name, p in dags["stream_upgrade"].params.items()}
    params.update(old_checkpoint="/cp/v1", new_checkpoint="/cp/v2", archive_root="/arch",
                  old_application="v1.py", new_application="v2.py", spark_conf={"spark.x": 1})
    assert plan(params=params)["spark_conf"] == {"spark.x": "1"}
    with pytest.raises(ValueError, match="param old_application is empty"):
        plan(params={**params, "old_application": ""})
    with pytest.raises(ValueError, match=r"unknown param\(s\) stop_timeout: this DAG's params are stream_name, "):
        plan(params={**params, "stop_timeout": 120})


def test_preflight_and_handover_get_the_chosen_start_and_its_consent(dags: dict) -> None:
    for dag_id in ("stream_upgrade", "stream_upgrade_cold"):
        dag = dags[dag_id]
        assert dag.params["handover_mode"] == "resume" and dag.params["accept_reprocessing"] is False
        for task_id in ("preflight", "extract_handover"):
            task = dag.get_task(task_id)
            assert "params.handover_mode" in task.start and "params.handover_value" in task.start
            assert task.accept_reprocessing == "{{ params.accept_reprocessing }}"
            assert task.accept_data_loss == "{{ params.accept_data_loss }}"


def plan_params(dags: dict, **overrides: object) -> tuple[object, dict]:
    plan = dags["stream_upgrade"].get_task("plan").python_callable
    params = {name: p.value if hasattr(p, "value") else p for name, p in dags["stream_upgrade"].params.items()}
    params.update(old_checkpoint="/cp/v1", new_checkpoint="/cp/v2", archive_root="/arch",
                  old_application="v1.py", new_application="v2.py", **overrides)
    return plan, params


def test_plan_fixes_each_version_s_spark(dags: dict) -> None:
    plan, params = plan_params(dags, spark_conf={"spark.jars": "/j/kafka-4.0.jar", "spark.x": 1},
                               old_spark={"spark_home": "/opt/spark-3.5", "conf": {"spark.jars": "/j/kafka-3.5.jar"}},
                               new_spark={"conn_id": "spark_40", "spark_submit": "/opt/spark-4/bin/spark-submit",
                                          "jars": ["/j/udf.jar"]})
    planned = plan(params=params)
    assert planned["old_spark_conf"] == {"spark.jars": "/j/kafka-3.5.jar", "spark.x": "1"}
    assert (planned["old_spark_home"], planned["old_spark_submit"], planned["old_conn_id"]) == ("/opt/spark-3.5", "", "")
    assert (planned["old_master"], planned["old_deploy_mode"]) == ("local[2]", "client")  # the shared ones
    assert planned["new_spark_conf"] == {"spark.jars": "/j/kafka-4.0.jar,/j/udf.jar", "spark.x": "1"}
    assert (planned["new_conn_id"], planned["new_spark_submit"]) == ("spark_40", "/opt/spark-4/bin/spark-submit")
    assert (planned["new_master"], planned["new_deploy_mode"]) == ("", "")  # from the connection
    # without per-version settings both versions run as before: the shared master, mode and conf
    plain = plan(params=plan_params(dags, spark_conf={"spark.x": 1})[1])
    for version in ("old", "new"):
        assert plain[f"{version}_spark_conf"] == plain["spark_conf"] == {"spark.x": "1"}
        assert (plain[f"{version}_master"], plain[f"{version}_spark_home"], plain[f"{version}_conn_id"]) == \
            ("local[2]", "", "")


def test_plan_refuses_bad_spark_settings(dags: dict) -> None:
    from airflow_ckpt_provider.checkpoint.errors import InvalidSparkSettings

    plan, params = plan_params(dags, new_spark={"spark_hom": "/opt/spark"})
    with pytest.raises(InvalidSparkSettings, match=r"param new_spark with unknown key\(s\) spark_hom"):
        plan(params=params)


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold"])
def test_new_launches_use_the_new_spark_and_the_rollback_the_old(dags: dict, dag_id: str) -> None:
    """Each launch takes its version's Spark from the plan: start_standby and relaunch the new
    version's, the rollback's restart of v1 the old version's."""
    from airflow.sdk.definitions.xcom_arg import PlainXComArg

    dag = dags[dag_id]
    launches = {"relaunch": "new", "rollback_restart_old": "old"}
    if dag.has_task("start_standby"):
        launches["start_standby"] = "new"
    for task_id, version in launches.items():
        task = dag.get_task(task_id)
        wired = {"conf": task.conf, "master": task.master, "deploy_mode": task.deploy_mode,
                 "conn_id": task.spark_conn_id, "spark_home": task.spark_home, "spark_submit": task.spark_binary}
        for what, value in wired.items():
            assert isinstance(value, PlainXComArg) and value.operator.task_id == "plan", (task_id, what)
            key = f"{version}_spark_{what}" if what == "conf" else f"{version}_{what}"
            assert value.key == key, (task_id, what, value.key)


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold"])
def test_the_upgrade_stop_refuses_an_old_version_it_cannot_see(dags: dict, dag_id: str) -> None:
    dag = dags[dag_id]
    assert dag.get_task("graceful_stop").fail_if_no_heartbeat is True
    assert dag.get_task("rollback_stop_new").fail_if_no_heartbeat is False  # a rollback stops what it can


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold"])
def test_state_export_feeds_the_relaunch(dags: dict, dag_id: str) -> None:
    """The relaunch takes the export's result (spark.ckpt.initialStatePath); the export reads the
    old checkpoint with the new version's Spark, and carry_state reaches it."""
    dag = dags[dag_id]
    export, relaunch = dag.get_task("export_state"), dag.get_task("relaunch")
    assert "export_state" in relaunch.get_flat_relative_ids(upstream=True)
    assert relaunch.initial_state == FromRecord(RecordInput.STATE_EXPORT)
    assert export.carry_state == "{{ params.carry_state }}"
    assert dag.params["carry_state"] is True
    assert export.handover == FromRecord(RecordInput.HANDOVER)
    assert export.export_uri == FromRecord(RecordInput.STATE_EXPORT_LOCATION)


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold", "stream_upgrade_on_artifact"])
def test_compatibility_check_before_the_approval(dags: dict, dag_id: str) -> None:
    from airflow_ckpt_provider.operators.compat import CompatibilityCheckOperator

    dag = dags[dag_id]
    assert dag.params["check_compatibility"] is True
    check = dag.get_task("compatibility_check")
    assert isinstance(check, CompatibilityCheckOperator) and check.fail_if_does_not_start
    assert dag.get_task("preflight").downstream_task_ids == {"compatibility_check"}
    assert check.downstream_task_ids == {"choose_path"}
    assert dag.get_task("choose_path").downstream_task_ids == {"approve"}
    # the param switches it off; an upgrade under way or ended is the planner's to decide (from the journal)
    assert check.enabled == "{{ params.check_compatibility }}"
    assert "params.new_checkpoint" in check.live_locations["new checkpoint"]
    assert dag.get_task("approve").body is None, "the approver reads the check's verdict in the journal"
    assert dag.get_task("choose_path").verdict == FromRecord(RecordInput.COMPATIBILITY_VERDICT), \
        "the path reads the verdict the check recorded, not its XCom"
    assert "compatibility_check" in dag.get_task("report").step_names
    assert "preflight" in check.journal, "the verdict goes in the journal's planning, where the report reads it"


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold", "stream_upgrade_on_artifact"])
def test_every_step_reads_and_writes_through_the_storage_connection(dags: dict, dag_id: str) -> None:
    """One param reaches every connection of the provider's storage: checkpoints, archive, journal."""
    dag = dags[dag_id]
    assert dag.params["storage_conn_id"] == ""
    fields = ("storage_conn_id", "archive_conn_id", "journal_conn_id")
    wired = {}
    for task in dag.tasks:
        for field in fields:
            if hasattr(task, field):
                wired[(task.task_id, field)] = getattr(task, field)
    touching = {task_id for task_id, _ in wired}
    assert {"preflight", "compatibility_check", "graceful_stop", "extract_handover", "export_state", "archive",
            "relaunch", "verify", "rollback_stop_new", "rollback_handover", "rollback_restore",
            "rollback_restart_old", "rollback_restart_forward", "report"} <= touching
    missing = {key: value for key, value in wired.items() if value != "{{ params.storage_conn_id }}"}
    assert not missing, f"steps not given the storage connection: {missing}"
    # given as a template, it must be rendered: an operator that does not template the field gets
    # the text "{{ params.storage_conn_id }}" as a connection id
    unrendered = sorted(key for key in wired if key[1] not in dags[dag_id].get_task(key[0]).template_fields)
    assert not unrendered, f"steps that would get the template's text as a connection id: {unrendered}"


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold", "stream_upgrade_on_artifact"])
def test_auto_mode_restarts_in_place_on_the_old_checkpoint(dags: dict, dag_id: str) -> None:
    """mode auto: a path of its own after the approval — stop, handover, archive that never removes
    the old checkpoint, the NEW version on the OLD checkpoint, a resume check; its rollback
    restarts the OLD version on the same checkpoint."""
    from airflow_ckpt_provider.operators.compat import UpgradePathOperator
    from airflow_ckpt_provider.upgrade.steps import PATHS, Path

    dag = dags[dag_id]
    assert dag.params["mode"] == "new_checkpoint", "the migration stays the default"
    assert dag.params.get_param("mode").schema["enum"] == ["new_checkpoint", "auto"]
    steps = ["in_place_stop", "in_place_handover", "in_place_archive", "in_place_restart", "in_place_verify"]
    path = dag.get_task("choose_path")
    assert isinstance(path, UpgradePathOperator) and "params.mode" in path.mode and path.journal
    assert path.in_place_steps == steps, "a resumed upgrade recognises its path in the journal"
    assert dag.get_task("approve").body is None, "the approver reads the path chosen in the journal"
    steps = ["in_place_stop", "in_place_handover", "in_place_archive", "in_place_restart", "in_place_verify"]
    for upstream, downstream in zip(steps, steps[1:], strict=False):
        assert dag.get_task(upstream).downstream_task_ids >= {downstream}, (upstream, downstream)
    assert dag.get_task("in_place_stop").upstream_task_ids == {"approve"}
    assert dag.get_task("in_place_archive").remove_source is False, "the new version goes on writing it"
    restart = dag.get_task("in_place_restart")
    assert restart.allow_existing_checkpoint and "params.old_checkpoint" in restart.checkpoint_uri
    assert "params.new_application" in restart.application and not restart.old_checkpoint_uri
    assert restart.handover is None, "no offsets: Spark resumes the query on its checkpoint"
    verify = dag.get_task("in_place_verify")
    assert verify.in_place and "params.old_checkpoint" in verify.checkpoint_uri
    stop = dag.get_task("in_place_rollback_stop")
    assert stop.trigger_rule == "all_done" and stop.upstream_task_ids == {"in_place_verify"}
    assert stop.downstream_task_ids == {"in_place_rollback_restart"}
    assert dag.get_task("in_place_rollback_stop").launch_handle == FromRecord(RecordInput.IN_PLACE_HANDLE)
    back = dag.get_task("in_place_rollback_restart")
    assert back.allow_existing_checkpoint and "params.old_application" in back.application
    assert "params.old_checkpoint" in back.checkpoint_uri and back.journal_phase == "rollback"
    report = dag.get_task("report")
    assert report.in_place == PATHS[Path.IN_PLACE] and report.in_place.steps == tuple(steps)
    assert {*report.in_place.steps, *report.in_place.restarts} <= set(dag.task_ids)
    assert "in_place_rollback_restart" in report.upstream_task_ids


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold", "stream_upgrade_on_artifact"])
def test_a_skipped_path_branch_skips_every_step(dags: dict, dag_id: str) -> None:
    """A "Reject" skips the approval's children (each path's first step). Every step after it must then be
    skipped too: each keeps the default trigger rule, all_success, although it also depends on
    ``plan``'s XCom (a rule like none_failed_min_one_success would run it on plan's success)."""
    dag = dags[dag_id]
    steps = ["graceful_stop", "extract_handover", "export_state", "archive", "relaunch", "verify",
             "in_place_stop", "in_place_handover", "in_place_archive", "in_place_restart", "in_place_verify"]
    steps += [] if dag_id.endswith("_cold") else ["start_standby"]
    assert {name: dag.get_task(name).trigger_rule for name in steps} == dict.fromkeys(steps, "all_success")
    for name in steps:
        upstream = dag.get_task(name).upstream_task_ids
        assert upstream & {"approve", *steps}, f"{name} must come after approve: {upstream}"


def leaves(value: object) -> list[object]:
    """Every value in a template field, through dicts, lists and tuples."""
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in leaves(item)]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in leaves(item)]
    return [value]


#: What a step after the approval may take from another task's XCom: the plan's launch settings.
LAUNCH_SETTINGS = {f"{version}_{key}" for version in ("old", "new") for key in (
    "application_args", "spark_conf", "master", "deploy_mode", "conn_id", "spark_home", "spark_submit")}


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold", "stream_upgrade_on_artifact"])
def test_after_the_approval_a_step_takes_other_steps_results_from_the_record(dags: dict, dag_id: str) -> None:
    """One upgrade state: after the approval no task takes an XComArg but the plan's launch
    settings, and no template pulls another step's XCom but the journal location; what a step needs
    of another step's result it reads from the upgrade record (FromRecord)."""
    from airflow.sdk.definitions.xcom_arg import PlainXComArg, XComArg

    dag = dags[dag_id]
    journal = dag.get_task("graceful_stop").journal
    assert "xcom_pull(task_ids='preflight')" in journal and "journal" in journal
    after = dag.get_task("approve").get_flat_relative_ids(upstream=False)
    assert {"graceful_stop", "relaunch", "rollback_stop_new", "in_place_rollback_stop", "report"} <= after
    found = []
    for task_id in sorted(after):
        task = dag.get_task(task_id)
        for field in task.template_fields:
            for leaf in leaves(getattr(task, field)):
                if isinstance(leaf, XComArg):
                    plain = isinstance(leaf, PlainXComArg)
                    if not (plain and leaf.operator.task_id == "plan" and leaf.key in LAUNCH_SETTINGS):
                        found.append((task_id, field, f"XComArg of {leaf.operator.task_id if plain else leaf}"))
                elif isinstance(leaf, str) and "xcom_pull" in leaf and leaf != journal:
                    found.append((task_id, field, leaf))
    assert not found, f"steps after the approval that read another step's XCom: {found}"


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold", "stream_upgrade_on_artifact"])
def test_record_inputs_are_template_fields_of_journaled_steps(dags: dict, dag_id: str) -> None:
    """A FromRecord is read by the journaled step when it runs, and only in a template field: anywhere
    else it would reach the step as the marker itself. The path (a decision) reads its verdict itself."""
    from airflow_ckpt_provider.operators.compat import UpgradePathOperator
    from airflow_ckpt_provider.operators.journaled import JournaledStep

    used = {}
    for task in dags[dag_id].tasks:
        for name, value in vars(task).items():
            if isinstance(value, FromRecord):
                used[(task.task_id, name)] = value.input
                assert name in task.template_fields and task.journal, (task.task_id, name)
                assert isinstance(task, UpgradePathOperator) and name == "verdict" or \
                    isinstance(task, JournaledStep) and task.require_journal, (task.task_id, name)
    expected = {
        ("choose_path", "verdict"): RecordInput.COMPATIBILITY_VERDICT,
        ("export_state", "export_uri"): RecordInput.STATE_EXPORT_LOCATION,
        ("export_state", "handover"): RecordInput.HANDOVER, ("export_state", "upgrade_id"): RecordInput.UPGRADE_ID,
        ("archive", "handover"): RecordInput.HANDOVER, ("archive", "upgrade_id"): RecordInput.UPGRADE_ID,
        ("relaunch", "handover"): RecordInput.HANDOVER, ("relaunch", "initial_state"): RecordInput.STATE_EXPORT,
        ("verify", "handover"): RecordInput.HANDOVER,
        ("rollback_stop_new", "launch_handle"): RecordInput.NEW_HANDLE,
        ("rollback_handover", "handover"): RecordInput.HANDOVER,
        ("rollback_handover", "rollback_checkpoint_uri"): RecordInput.ROLLBACK_CHECKPOINT,
        ("rollback_restore", "archive_uri"): RecordInput.ARCHIVE_LOCATION,
        ("rollback_restart_forward", "checkpoint_uri"): RecordInput.ROLLBACK_CHECKPOINT,
        ("rollback_restart_forward", "starting_offsets"): RecordInput.ROLLBACK_STARTING_OFFSETS,
        ("in_place_archive", "handover"): RecordInput.IN_PLACE_HANDOVER,
        ("in_place_archive", "upgrade_id"): RecordInput.UPGRADE_ID,
        ("in_place_verify", "handover"): RecordInput.IN_PLACE_HANDOVER,
        ("in_place_rollback_stop", "launch_handle"): RecordInput.IN_PLACE_HANDLE,
    }
    if not dag_id.endswith("_cold"):
        expected[("relaunch", "standby_handle")] = RecordInput.STANDBY_HANDLE
    assert used == expected


def test_the_dag_serializes_with_its_record_inputs(dags: dict) -> None:
    """The DAG processor stores the DAG with each FromRecord as its text (the task reads the DAG file)."""
    import json

    from airflow.serialization.serialized_objects import DagSerialization

    data = DagSerialization.to_dict(dags["stream_upgrade"])
    tasks = {t["__var"]["task_id"]: t["__var"] for t in data["dag"]["tasks"]}
    assert tasks["rollback_stop_new"]["launch_handle"] == "FromRecord(new_handle)"
    assert tasks["relaunch"]["standby_handle"] == "FromRecord(standby_handle)"
    json.dumps(data)  # the stored form is JSON
    assert DagSerialization.from_dict(data).get_task("verify").handover == "FromRecord(handover)"


def test_the_switchover_dag_switches_inside_the_drivers(dags: dict) -> None:
    """stream_upgrade_switchover: the standby, then one switchover step (stop, handover, state seed and
    release in the drivers), then the state export that checks the seed, verify and archive; no graceful
    stop, handover or release task; the rollback and the in-place path as in the other DAGs."""
    import json

    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator
    from airflow_ckpt_provider.upgrade.steps import PATHS, ROLLBACK, Path

    dag = dags["stream_upgrade_switchover"]
    chain = ["approve", *PATHS[Path.SWITCHOVER].steps, *ROLLBACK, "report"]
    assert chain[1:6] == ["start_standby", "switchover", "export_state", "verify", "archive"]
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        assert downstream in dag.get_task(upstream).downstream_task_ids, (upstream, downstream)
    assert not {"graceful_stop", "extract_handover", "relaunch"} & set(dag.task_ids)
    switch = dag.get_task("switchover")
    assert isinstance(switch, StandbySwitchoverOperator) and switch.retries == 1 and switch.require_journal
    assert switch.standby_handle == FromRecord(RecordInput.STANDBY_HANDLE)
    assert "params.old_checkpoint" in switch.old_checkpoint_uri and "params.new_checkpoint" in switch.checkpoint_uri
    assert "params.handover_mode" in switch.start and "params.accept_reprocessing" in switch.accept_reprocessing
    assert switch.carry_state == "{{ params.carry_state }}", "the standby seeds the state"
    assert switch.accept_empty_state == "{{ not params.carry_state }}", "carry_state off: EMPTY state, consented"
    assert {"start", "accept_reprocessing", "accept_data_loss", "carry_state", "accept_empty_state"} <= set(
        switch.template_fields)
    export = dag.get_task("export_state")
    assert export.seeded_state == FromRecord(RecordInput.SEEDED_STATE) and "seeded_state" in export.template_fields
    assert dags["stream_upgrade"].get_task("export_state").seeded_state == "", "no seed on the standby path"
    assert dag.get_task("preflight").relaunch_mode == "switchover"
    # the later steps read the handover and the new version from the switchover's result
    assert dag.get_task("verify").handover == dag.get_task("archive").handover == FromRecord(RecordInput.HANDOVER)
    assert dag.get_task("rollback_stop_new").launch_handle == FromRecord(RecordInput.NEW_HANDLE)
    assert dag.get_task("report").path == PATHS[Path.SWITCHOVER]
    data = DagSerialization.to_dict(dag)
    json.dumps(data)
    assert DagSerialization.from_dict(data).get_task("switchover").standby_handle == "FromRecord(standby_handle)"


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold", "stream_upgrade_switchover",
                                    "stream_upgrade_on_artifact"])
def test_every_task_has_the_execution_timeout_and_retries_of_its_row(dags: dict, dag_id: str) -> None:
    """No task waits without a deadline: each step's execution_timeout is its row's budget plus the DAG's
    waits it covers (the builder's defaults here), the plan's its own."""
    from datetime import timedelta

    from airflow_ckpt_provider.dags.stream_upgrade import PLAN_TIMEOUT

    dag = dags[dag_id]
    assert dag.get_task("plan").execution_timeout == PLAN_TIMEOUT
    minutes = {"graceful_stop": 15, "relaunch": 20, "verify": 600 / 60 + 20 / 60, "archive": 360, "report": 30,
               "approve": 13 * 60, "rollback_stop_new": 11, "in_place_restart": 20, "rollback_restart_old": 20}
    for task_id, expected in minutes.items():
        if not dag.has_task(task_id):  # the switchover DAG's stop and launch are its switchover
            continue
        assert dag.get_task(task_id).execution_timeout == timedelta(minutes=expected), task_id
    assert all(task.execution_timeout is not None for task in dag.tasks), "every task has a deadline"
    retried = {t.task_id for t in dag.tasks if t.retries == 1}
    assert retried == ({"graceful_stop", "relaunch", "verify", "switchover"} & set(dag.task_ids)) | {
        "in_place_stop", "in_place_restart", "in_place_verify", "rollback_stop_new", "in_place_rollback_stop"}


@pytest.mark.parametrize("dag_id", ["stream_upgrade", "stream_upgrade_cold", "stream_upgrade_switchover"])
def test_every_journaled_task_is_declared_as_the_step_kind_it_is(dags: dict, dag_id: str) -> None:
    """The DAG declares each step's kind (the planner plans by it); the in-place steps are the
    migration's operator classes declared as their own kinds, not copies under other task ids."""
    from airflow_ckpt_provider.operators.journaled import JournaledStep

    journaled = [t for t in dags[dag_id].tasks if isinstance(t, JournaledStep)]
    assert journaled and all(t.step_kind == t.task_id for t in journaled)
    dag = dags[dag_id]
    for in_place, migration in (("in_place_stop", "rollback_stop_new"), ("in_place_handover", "extract_handover"),
                                ("in_place_archive", "archive"), ("in_place_verify", "verify"),
                                ("in_place_rollback_restart", "rollback_restart_old")):
        if dag.has_task(migration):
            assert type(dag.get_task(in_place)) is type(dag.get_task(migration)), in_place


def test_the_reference_dag_file_is_its_docs_and_one_call() -> None:
    """dags/stream_upgrade.py builds no operator and no param: the DAGs come from the step table, through
    one call of the package's factory, with the package's params; under 150 lines of code besides its
    docstring."""
    import ast

    source = DAG_FILE.read_text(encoding="utf-8")
    tree = ast.parse(source)
    body = tree.body[1:] if ast.get_docstring(tree) else tree.body
    code = [line for line in source.splitlines()[body[0].lineno - 1:]
            if line.strip() and not line.strip().startswith("#")]
    assert len(code) < 150, len(code)
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert called == {"build_reference_dags", "Asset"}, called
    assert sum(isinstance(node, ast.Call) and getattr(node.func, "id", "") == "build_reference_dags"
               for node in ast.walk(tree)) == 1, "one call builds the DAGs"
    assert not [name for name in called if name.endswith("Operator") or name in ("task", "chain", "DAG")]
