"""Does a new version need a new checkpoint, and will it start? The decision, pure, from what Spark says.

Two trial runs of the new version give the facts (:mod:`airflow_ckpt_provider.hooks.compat` runs
them on copies, never on the live checkpoint):

* **in place** — the new version resumes on a COPY of the old checkpoint;
* **migrated** — the new version starts on an empty checkpoint at the handover.

:func:`classify` turns the two :class:`TrialResult` into a :class:`CompatibilityVerdict`: in
place OK (no new checkpoint needed: a plain restart will do), or a new checkpoint is needed
because of the :class:`Rule` of Spark's table ("Recovery Semantics after Changes in a Streaming
Query") that Spark's own error names — the error class (``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``,
``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``, the sources-count assertion, ...),
the operator and the schemas on both sides — and whether the migrated start works (else the
driver's error and log tail). Where Spark itself does not fail on a restart that its guide
forbids (a stream-stream join whose type changed keeps the same state schemas), the stateful
operators each version recorded (:class:`StatefulOperator`, written by
:class:`airflow_ckpt_provider.spark.GracefulStop` as ``_ckpt/stateful-operators.json`` from the
query's executed plan) are compared. The settings Spark fixes for a checkpoint's life
(:mod:`airflow_ckpt_provider.checkpoint.fixed_settings`, judged before the trials) come first: one
that needs a new checkpoint decides the in-place answer (:attr:`Rule.FIXED_SETTING`) without the
in-place trial. Pure: no Airflow, no Spark, no I/O.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidTrialRecord, InvalidVerdict, JsonTooLarge, TrialRefused
from airflow_ckpt_provider.checkpoint.fixed_settings import SETTING_CODEC as _SETTING
from airflow_ckpt_provider.checkpoint.fixed_settings import SettingVerdict
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, array_of, object_of, one_of


class TrialKind(StrEnum):
    IN_PLACE = "in_place"
    MIGRATED = "migrated"


class Rule(StrEnum):
    """The rule of Spark's table of changes between restarts that makes a new checkpoint necessary."""

    SOURCE_CHANGED = "source_changed"            # number or type of input sources
    STATE_KEY_SCHEMA = "state_key_schema"        # grouping / dedup keys, join keys
    STATE_VALUE_SCHEMA = "state_value_schema"    # aggregates, state values
    OPERATOR_ADDED = "operator_added"            # a stateful operator added
    OPERATOR_REMOVED = "operator_removed"        # a stateful operator removed
    OPERATOR_CHANGED = "operator_changed"        # a stateful operator replaced by another
    JOIN_TYPE = "join_type"                      # stream-stream join type
    STATE_CONFIG = "state_config"                # a state store setting that cannot change
    SINK_CHANGED = "sink_changed"                # sink type or path
    FIXED_SETTING = "fixed_setting"              # a setting Spark fixes for a checkpoint's life
    UNKNOWN = "unknown"                          # the restart failed for another reason

    @property
    def text(self) -> str:
        return _RULE_TEXT[self]


_RULE_TEXT = {
    Rule.SOURCE_CHANGED: "the number or type of input sources changed",
    Rule.STATE_KEY_SCHEMA: "a stateful operator's state key schema changed (grouping, deduplication or join keys)",
    Rule.STATE_VALUE_SCHEMA: "a stateful operator's state value schema changed (aggregates or state values)",
    Rule.OPERATOR_ADDED: "a stateful operator was added",
    Rule.OPERATOR_REMOVED: "a stateful operator was removed",
    Rule.OPERATOR_CHANGED: "a stateful operator was replaced by another",
    Rule.JOIN_TYPE: "the type of a stream-stream join changed",
    Rule.STATE_CONFIG: "a state store setting changed that cannot change between restarts",
    Rule.SINK_CHANGED: "the sink type or output path changed",
    Rule.FIXED_SETTING: "a setting Spark fixes for a checkpoint's life changed",
    Rule.UNKNOWN: "the restart on the old checkpoint fails",
}

#: Spark's error classes (error-conditions.json) -> the rule they mean.
ERROR_CLASS_RULES: dict[str, Rule] = {
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE": Rule.STATE_KEY_SCHEMA,
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE": Rule.STATE_VALUE_SCHEMA,
    "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION": Rule.STATE_VALUE_SCHEMA,
    "STATE_STORE_COLUMN_FAMILY_SCHEMA_INCOMPATIBLE": Rule.STATE_VALUE_SCHEMA,
    "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE": Rule.STATE_VALUE_SCHEMA,
    "STATE_STORE_KEY_ROW_FORMAT_VALIDATION_FAILURE": Rule.STATE_KEY_SCHEMA,
    "STATE_STORE_VALUE_ROW_FORMAT_VALIDATION_FAILURE": Rule.STATE_VALUE_SCHEMA,
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA": Rule.OPERATOR_CHANGED,
    "STATE_STORE_INVALID_CONFIG_AFTER_RESTART": Rule.STATE_CONFIG,
    # a stateful operator the old checkpoint has no state for: its first state file is missing
    "CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS": Rule.OPERATOR_ADDED,
}

_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")
_SOURCES = re.compile(r"There are \[(\d+)\] sources in the checkpoint offsets and now there are \[(\d+)\] "
                      r"sources requested by the query")
_KEY_SCHEMAS = re.compile(r"Existing key_schema=(.*?) and new key_schema=(.*?)\.\s*(?:If you want|\n|$)", re.S)
_VALUE_SCHEMAS = re.compile(r"Existing value_schema=(.*?) and new value_schema=(.*?)\.\s*(?:If you want|\n|$)", re.S)
_EVOLUTION = re.compile(r"new value_schema=(.*?) and old value_schema=(.*?)(?:\s*Please|\n|$)", re.S)
_OPS = re.compile(r"Stateful operators in the metadata: \[(.*?)\]; Stateful operators in current batch: \[(.*?)\]",
                  re.S)
#: the state store file a restart looked for ("delta file" is Spark's name for a state store
#: change file, nothing to do with Delta Lake) and the operator it belongs to
_MISSING_STATE = re.compile(r"(?P<file>\S+/state/(?P<op>\d+)/\d+/\d+\.delta)")
_OP_ITEM = re.compile(r"OperatorId:\s*(\d+)\s*->\s*OperatorName:\s*([A-Za-z0-9_]+)")
#: lines of Spark's, the JVM's and spark-submit's own logging (not the job's words)
_SPARK_LOG_LINE = re.compile(r"^\s*(\d{2,4}[/-]\d{2}[/-]\d{2}[ T]\d{2}:\d{2}|WARNING: |Using Spark's|To adjust logging|"
                             r"at |\.\.\. \d+ more|Setting default log level)")
#: lines of a driver log that carry a Spark error worth showing
_ERROR_LINE = re.compile(r"(StreamingQueryException|AnalysisException|SparkException|IllegalStateException|"
                         r"AssertionError|IllegalArgumentException|Error:|Traceback|\[[A-Z_]{6,}\])")


@dataclass(frozen=True)
class StatefulOperator:
    """One stateful operator of a query as its executed plan shows it: id, Spark's node name
    (``StateStoreSaveExec``, ``StreamingSymmetricHashJoinExec``, ...) and what identifies its
    semantics (the join type, the grouping or deduplication keys)."""

    operator_id: int
    name: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "name": self.name, "detail": self.detail}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StatefulOperator:
        """From the operators record a trial's driver writes, through its codec (lenient: ids as
        text accepted, keys a driver adds ignored); :class:`InvalidVerdict` otherwise."""
        values = _DRIVER_OPERATOR.decode(raw)
        return cls(values["operator_id"], values["name"], values["detail"] or "")

    def describe(self) -> str:
        return f"{self.operator_id} {self.name}" + (f" ({self.detail})" if self.detail else "")


#: The format number of the files a driver writes for the compatibility check (:class:`StatefulOperators`,
#: :class:`TrialRecord`); the previous release wrote them without one (format 0).
DRIVER_FILES_FORMAT = 1


def _decode_driver_file(codec: Codec, data: str | bytes, path: str) -> dict[str, Any]:
    try:
        return codec.present(data)
    except InvalidTrialRecord as exc:
        raise InvalidTrialRecord(found=exc.found, expected=exc.expected, path=path or None) from None


@dataclass(frozen=True)
class StatefulOperators:
    """``_ckpt/stateful-operators.json``: the stateful operators of a query's executed plan, written
    by the job's GracefulStop once its first batch ran (format 1: ``{"format": 1, "operators":
    [...]}``; the previous release wrote the bare array, read as format 0)."""

    operators: tuple[StatefulOperator, ...]

    def to_json(self) -> str:
        return json.dumps(_OPERATORS_FILE.encode({"operators": [o.to_dict() for o in self.operators]}),
                          sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes, *, path: str = "") -> StatefulOperators:
        """Decode the file through its codec; :class:`InvalidTrialRecord` (naming ``path``) when it
        is not this record (:class:`JsonTooLarge` beyond the JSON limits)."""
        return cls(**_decode_driver_file(_OPERATORS_FILE, data, path))


@dataclass(frozen=True)
class TrialRecord:
    """``_ckpt/trial.json``: what a trial's driver writes when its query ended (format 1; the
    previous release wrote the same keys without a format number). ``contract``: the driver ran
    GracefulStop; ``outputs``: the outputs it took from ``sink_location`` (name -> the live
    location it replaced): none means the trial contract was not followed; ``batches`` it ran;
    ``operators`` of its executed plan (None: the plan could not be read); the query's ``error``."""

    batches: int = 0
    operators: tuple[StatefulOperator, ...] | None = None
    outputs: Mapping[str, str] = field(default_factory=dict, hash=False)
    error: str = ""
    contract: bool = True

    def to_json(self) -> str:
        return json.dumps(_TRIAL_FILE.encode({
            "contract": self.contract, "outputs": dict(self.outputs), "batches": self.batches, "error": self.error,
            "operators": None if self.operators is None else [o.to_dict() for o in self.operators]}), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes, *, path: str = "") -> TrialRecord:
        """Decode the file through its codec; :class:`InvalidTrialRecord` (naming ``path``) when it
        is not this record (:class:`JsonTooLarge` beyond the JSON limits)."""
        return cls(**_decode_driver_file(_TRIAL_FILE, data, path))


@dataclass(frozen=True)
class TrialResult:
    """What one trial run of the new version showed.

    ``started``: the query ran batches without failing (False when the driver failed; None when
    it neither failed nor committed a batch before the trial's time was up, so nothing was
    proven); ``batches_committed`` by this run; ``contract_honoured``: the driver declared the
    trial contract (sink redirected, stopped after the trial's batches); ``error_class`` and
    ``error_message``: Spark's error as the driver reported it; ``log_tail``: the driver log's end;
    ``operators``: the stateful operators of the query's plan, as the driver recorded them."""

    kind: TrialKind
    started: bool | None
    batches_committed: int = 0
    contract_honoured: bool = True
    error_class: str = ""
    error_message: str = ""
    log_tail: str = ""
    operators: tuple[StatefulOperator, ...] | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return _TRIAL.encode({"kind": self.kind.value, "started": self.started,
                              "batches_committed": self.batches_committed,
                "contract_honoured": self.contract_honoured, "error_class": self.error_class,
                "error_message": self.error_message, "log_tail": self.log_tail,
                "operators": None if self.operators is None else [o.to_dict() for o in self.operators],
                "seconds": round(self.seconds, 1)})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> TrialResult:
        """From :meth:`to_json` or its dict through its strict codec; :class:`InvalidVerdict`
        (:class:`JsonTooLarge` beyond the JSON limits) on anything else."""
        return cls(**_TRIAL.decode(data))


@dataclass(frozen=True)
class CompatibilityVerdict:
    """The answer of a compatibility check.

    ``in_place_ok``: the new version runs on (a copy of) the old checkpoint and Spark's rules allow
    it — no new checkpoint needed (None: the trial proved nothing, e.g. no batch ran);
    ``rule``: why a new checkpoint is needed (None when in place is OK); ``operator``: the
    stateful operator concerned; ``old`` / ``new``: the two sides (schemas, operators, source
    counts); ``migrated_ok``: the new version starts on a new checkpoint at the handover (None: not
    tried); ``error_class`` / ``driver_error`` / ``log_tail``: what Spark said (the in-place
    failure, or the migrated one when the new version does not start at all); ``state_batch`` /
    ``state_rows``: the old query's state the migrated trial was given (exported after that batch,
    that many rows; None: it started with empty state — a stateless query, or ``carry_state`` off);
    ``settings``: the settings Spark fixes for a checkpoint's life that the new version changes,
    judged from the old checkpoint before any trial
    (:func:`~airflow_ckpt_provider.checkpoint.fixed_settings.fixed_settings`)."""

    in_place_ok: bool | None
    migrated_ok: bool | None
    rule: Rule | None = None
    operator: str = ""
    old: str = ""
    new: str = ""
    error_class: str = ""
    driver_error: str = ""
    log_tail: str = ""
    trials: tuple[TrialResult, ...] = field(default=(), compare=False)
    state_batch: int | None = None
    state_rows: int | None = None
    settings: tuple[SettingVerdict, ...] = ()

    @property
    def new_version_starts(self) -> bool:
        """False when the new version fails on a new checkpoint (or, not tried there, in place for
        a reason no rule of the table explains): the upgrade must be refused before the stop."""
        if self.migrated_ok is not None:
            return self.migrated_ok
        return not (self.in_place_ok is False and self.rule is Rule.UNKNOWN)

    @property
    def error_line(self) -> str:
        """The one line of the driver's error that says what went wrong (Spark's message, else the
        last line naming an exception)."""
        line = _first_line(spark_error(self.driver_error)[1] or self.driver_error)
        return line if len(line) <= 300 else line[:297] + "..."

    @property
    def needs_new_checkpoint(self) -> bool | None:
        return None if self.in_place_ok is None else not self.in_place_ok

    def headline(self) -> str:
        """One line for logs, the approval and the report."""
        if not self.new_version_starts:
            return (f"the new version does not start: {self.error_class or 'driver failed'}"
                    + (f": {self.error_line}" if self.driver_error else ""))
        if self.in_place_ok:
            head = "in place OK: no new checkpoint needed (a plain restart on the old checkpoint works)"
        elif self.in_place_ok is None:
            head = "in place not proven (the trial on a copy ran no batch)"
        else:
            assert self.rule is not None
            head = f"needs a new checkpoint: {self.rule.text}"
            if self.rule is Rule.FIXED_SETTING:
                head += f" ({self.operator}: {self.old} -> {self.new})"
            elif self.operator:
                head += f" (operator {self.operator})"
        if self.migrated_ok is True:
            head += "; the new version starts on a new checkpoint at the handover"
            if self.state_batch is not None:
                head += " with the old query's state"
        return head

    def describe(self) -> list[str]:
        """The headline, then the two sides and Spark's error, one item per line."""
        lines = [self.headline()]
        if self.rule is not None and (self.old or self.new):
            lines += [f"old: {self.old}", f"new: {self.new}"]
        if self.error_class and self.in_place_ok is False:
            lines.append(f"Spark: [{self.error_class}] {self.error_line}".rstrip())
        lines += [f"setting {s.describe()}" for s in self.settings]
        if self.state_batch is not None:
            lines.append(f"migrated trial given the old query's state after batch {self.state_batch} "
                         f"({self.state_rows or 0:,} rows), as the upgrade will give it")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return _VERDICT.encode({"in_place_ok": self.in_place_ok, "migrated_ok": self.migrated_ok,
                "rule": self.rule.value if self.rule else None, "operator": self.operator, "old": self.old,
                "new": self.new, "error_class": self.error_class, "driver_error": self.driver_error,
                "log_tail": self.log_tail, "trials": [t.to_dict() for t in self.trials],
                "new_version_starts": self.new_version_starts, "headline": self.headline(),
                "state_batch": self.state_batch, "state_rows": self.state_rows,
                "settings": [s.to_dict() for s in self.settings]})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> CompatibilityVerdict:
        """From :meth:`to_json` or its dict (the check's XCom, derived keys and ``summary_md`` too)
        through its strict codec; :class:`InvalidVerdict` (:class:`JsonTooLarge` beyond the JSON
        limits) on anything else. A result that may be :class:`CompatibilitySkipped` is read with
        :func:`compatibility_result`."""
        return cls(**_VERDICT.decode(data))


# -- the codecs (airflow_ckpt_provider.records.codec) -----------------------------------------------
# Written by today's release without a format number; strict: only the keys :meth:`to_dict` writes,
# each of its JSON type. What a value derives from its other fields (a verdict's headline and
# new_version_starts, a setting's needs_new_checkpoint and recorded, and the check step's
# summary_md, its Markdown) is type-checked, then left out.

_TEXT = Field((str,), required=False, default="")
_COUNT_OR_NULL = Field((int,), required=False, nullable=True)
#: the Markdown the compatibility check step adds to its result (XCom) for the approval
_SUMMARY_MD = Field((str,), required=False, derived=True)

_OPERATOR = Codec("stateful operator", InvalidVerdict, {
    "operator_id": Field((int,)),
    "name": Field((str,)),
    "detail": _TEXT,
}, version=None)

#: what a trial's driver writes of a stateful operator (an older driver wrote ids as text)
_DRIVER_OPERATOR = Codec("stateful operator of the trial's driver", InvalidVerdict, {
    "operator_id": Field((int, str), decode=int),
    "name": Field((str,)),
    "detail": Field((str,), required=False, nullable=True),
}, version=None, unknown_keys="ignore")

#: The files a driver writes for the check: exchanged between releases like the control files, so a
#: key a newer driver adds is ignored (a change an older reader must not miss gets a new format number).
_DRIVER_OPERATORS = Field((list,), decode=array_of(dict, decode=StatefulOperator.from_dict),
                          expected="an array of objects with operator_id, name and detail")
_OPERATORS_FILE = Codec("stateful operators file", InvalidTrialRecord, {"operators": _DRIVER_OPERATORS},
                        version=DRIVER_FILES_FORMAT, versions=(UNVERSIONED,), unknown_keys="ignore",
                        too_large=JsonTooLarge, bare_array="operators")
_TRIAL_FILE = Codec("trial record", InvalidTrialRecord, {
    "contract": Field((bool,), required=False),
    "outputs": Field((dict,), required=False, decode=object_of(str)),
    "batches": Field((int,), required=False),
    "operators": Field((list,), required=False, nullable=True, decode=_DRIVER_OPERATORS.decode,
                       expected=_DRIVER_OPERATORS.expected),
    "error": Field((str,), required=False),
}, version=DRIVER_FILES_FORMAT, versions=(UNVERSIONED,), unknown_keys="ignore", too_large=JsonTooLarge)

_TRIAL = Codec("TrialResult", InvalidVerdict, {
    "kind": Field((str,), decode=one_of(*TrialKind, decode=TrialKind)),
    "started": Field((bool,), nullable=True),
    "batches_committed": Field((int,), required=False, default=0),
    "contract_honoured": Field((bool,), required=False, default=True),
    "error_class": _TEXT,
    "error_message": _TEXT,
    "log_tail": _TEXT,
    "operators": Field((list,), required=False, nullable=True,
                       decode=array_of(dict, decode=lambda o: StatefulOperator(**_OPERATOR.decode(o))),
                       expected="null or an array of objects with operator_id, name and detail"),
    "seconds": Field((float,), required=False, default=0.0, decode=float),
}, versions=(UNVERSIONED,), too_large=JsonTooLarge)

_VERDICT = Codec("CompatibilityVerdict", InvalidVerdict, {
    "in_place_ok": Field((bool,), nullable=True),
    "migrated_ok": Field((bool,), nullable=True),
    "rule": Field((str,), required=False, nullable=True, decode=one_of(*Rule, decode=Rule)),
    **{name: _TEXT for name in ("operator", "old", "new", "error_class", "driver_error", "log_tail")},
    "trials": Field((list,), required=False, default=(), decode=array_of(dict, decode=TrialResult.from_json),
                    expected="an array of TrialResult objects"),
    "state_batch": _COUNT_OR_NULL,
    "state_rows": _COUNT_OR_NULL,
    "settings": Field((list,), required=False, default=(),
                      decode=array_of(dict, decode=lambda v: SettingVerdict(**_SETTING.decode(v))),
                      expected="an array of setting verdicts (setting, old, new, effect, ...)"),
    "new_version_starts": Field((bool,), required=False, derived=True),
    "headline": Field((str,), required=False, derived=True),
    "summary_md": _SUMMARY_MD,
}, versions=(UNVERSIONED,), too_large=JsonTooLarge)

#: The key of :class:`CompatibilitySkipped` (the compatibility check's result when it tried nothing).
SKIPPED_KEY = "skipped"


def _reason(value: str) -> str:
    if not value.strip():
        raise ValueError("an empty reason")
    return value


_SKIPPED = Codec("CompatibilitySkipped", InvalidVerdict, {
    SKIPPED_KEY: Field((str,), decode=_reason, expected="the reason, a non-empty string"),
    "summary_md": _SUMMARY_MD,
}, versions=(UNVERSIONED,), too_large=JsonTooLarge)


@dataclass(frozen=True)
class CompatibilitySkipped:
    """The compatibility check's result when it tried nothing: ``reason`` says why (switched off,
    or an upgrade under way whose first verdict stands). JSON: ``{"skipped": reason}``."""

    reason: str

    def to_dict(self) -> dict[str, Any]:
        return _SKIPPED.encode({SKIPPED_KEY: self.reason})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> CompatibilitySkipped:
        """Decode (strict: :class:`InvalidVerdict` for anything else)."""
        return cls(reason=_SKIPPED.decode(data)[SKIPPED_KEY])


#: The compatibility check's result: its verdict, or that it tried nothing.
CompatibilityResult = CompatibilityVerdict | CompatibilitySkipped


def compatibility_result(data: str | bytes | Mapping[str, Any]) -> CompatibilityResult:
    """The compatibility check's result, as its step returns it (XCom, with ``summary_md``) or as the
    journal records it (without ``trials``, ``log_tail`` and ``summary_md``): a
    :class:`CompatibilitySkipped` when it carries ``skipped``, else a :class:`CompatibilityVerdict`,
    each by its strict codec; :class:`InvalidVerdict` (:class:`JsonTooLarge` beyond the JSON
    limits) on anything else."""
    raw = _VERDICT.parse(data)
    return CompatibilitySkipped.from_json(raw) if SKIPPED_KEY in raw else CompatibilityVerdict.from_json(raw)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


# -- reading Spark's errors ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SparkFailure:
    """A restart failure as Spark reported it, read from the driver's error text."""

    error_class: str
    message: str
    rule: Rule
    operator: str = ""
    old: str = ""
    new: str = ""


def spark_error(text: str) -> tuple[str, str]:
    """(error class, message) of the most specific Spark error in ``text`` (a driver's exception
    or log): the first class that is not only the ``STREAM_FAILED`` wrapper; the sources-count
    assertion has no class and reads as ``ASSERTION_FAILED``. ("", "") when nothing is found."""
    sources = _SOURCES.search(text)
    if sources:
        return "ASSERTION_FAILED", sources.group(0)
    classes = [m for m in _ERROR_CLASS.finditer(text)]
    chosen = next((m for m in classes if m.group(1) != "STREAM_FAILED"), classes[0] if classes else None)
    if chosen is None:
        lines = [line.strip() for line in text.splitlines() if _ERROR_LINE.search(line)]
        if not lines:  # a driver that exits with a message of its own: its last line outside Spark's logging
            lines = [line.strip() for line in text.splitlines() if line.strip() and not _SPARK_LOG_LINE.match(line)]
        return "", lines[-1] if lines else ""
    rest = text[chosen.end():]
    message = " ".join(line.strip() for line in rest.splitlines()[:8] if line.strip())
    if chosen.group(1) in ("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
                           "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"):
        message = " ".join(rest.split())[:4000]
    return chosen.group(1), message.strip()


def read_failure(text: str) -> SparkFailure | None:
    """The :class:`SparkFailure` Spark's error in ``text`` means, None when ``text`` has none."""
    error_class, message = spark_error(text)
    if not error_class and not message:
        return None
    if error_class == "ASSERTION_FAILED":
        found = _SOURCES.search(message)
        assert found is not None
        return SparkFailure(error_class, message, Rule.SOURCE_CHANGED,
                            old=f"{found.group(1)} source(s)", new=f"{found.group(2)} source(s)")
    rule = ERROR_CLASS_RULES.get(error_class, Rule.UNKNOWN)
    flat = " ".join(text.split())
    old = new = operator = ""
    if rule is Rule.STATE_KEY_SCHEMA and (m := _KEY_SCHEMAS.search(flat)):
        old, new = m.group(1).strip(), m.group(2).strip()
    elif rule is Rule.STATE_VALUE_SCHEMA and (m := _VALUE_SCHEMAS.search(flat)):
        old, new = m.group(1).strip(), m.group(2).strip()
    elif error_class == "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION" and (m := _EVOLUTION.search(flat)):
        new, old = m.group(1).strip(), m.group(2).strip()
    elif error_class == "CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS":
        found = _MISSING_STATE.search(flat)
        operator = found.group("op") if found else ""
        where = f" ({found.group('file')} is missing)" if found else ""
        old = (f"no state for stateful operator {operator or '?'} in the old checkpoint{where}; Spark calls a "
               "state store change file a 'delta file': this is not about Delta Lake")
        new = f"stateful operator {operator or '?'} (added by the new version)"
    elif rule is Rule.OPERATOR_CHANGED and (m := _OPS.search(flat)):
        before, after = _op_items(m.group(1)), _op_items(m.group(2))
        rule, operator = _operator_rule(before, after)
        old, new = m.group(1).strip() or "none", m.group(2).strip() or "none"
    return SparkFailure(error_class, message, rule, operator=operator, old=old, new=new)


def _op_items(text: str) -> dict[int, str]:
    return {int(i): name for i, name in _OP_ITEM.findall(text)}


def _operator_rule(before: Mapping[int, str], after: Mapping[int, str]) -> tuple[Rule, str]:
    """Added, removed or changed operators between the metadata and the current batch."""
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(i for i in set(before) & set(after) if before[i] != after[i])
    if changed:
        i = changed[0]
        return Rule.OPERATOR_CHANGED, f"{i}: {before[i]} -> {after[i]}"
    if added and not removed:
        return Rule.OPERATOR_ADDED, ", ".join(f"{i} {after[i]}" for i in added)
    if removed and not added:
        return Rule.OPERATOR_REMOVED, ", ".join(f"{i} {before[i]}" for i in removed)
    return Rule.OPERATOR_CHANGED, ""


def compare_operators(old: Sequence[StatefulOperator], new: Sequence[StatefulOperator]) -> SparkFailure | None:
    """What Spark does not check on a restart but its guide forbids, from the stateful operators
    both versions recorded: a stream-stream join whose type changed, an operator added, removed
    or replaced. None when they match (id, node name and join type)."""
    before, after = {o.operator_id: o for o in old}, {o.operator_id: o for o in new}
    for op_id in sorted(set(before) & set(after)):
        a, b = before[op_id], after[op_id]
        if a.name != b.name:
            return SparkFailure("", "", Rule.OPERATOR_CHANGED, operator=f"{op_id}", old=a.describe(), new=b.describe())
        if "Join" in a.name and _join_type(a.detail) != _join_type(b.detail):
            return SparkFailure("", "", Rule.JOIN_TYPE, operator=f"{op_id} {a.name}", old=a.describe(),
                                new=b.describe())
    names = {True: after, False: before}
    for is_added, ops in ((True, set(after) - set(before)), (False, set(before) - set(after))):
        if ops:
            rule = Rule.OPERATOR_ADDED if is_added else Rule.OPERATOR_REMOVED
            listed = ", ".join(names[is_added][i].describe() for i in sorted(ops))
            return SparkFailure("", "", rule, operator=listed,
                                old=", ".join(o.describe() for o in old) or "none",
                                new=", ".join(o.describe() for o in new) or "none")
    return None


def _join_type(detail: str) -> str:
    found = re.search(r"\b(Inner|LeftOuter|RightOuter|FullOuter|LeftSemi|LeftAnti)\b", detail)
    return found.group(1) if found else detail


def classify(
    in_place: TrialResult | None,
    migrated: TrialResult | None = None,
    *,
    old_operators: Sequence[StatefulOperator] | None = None,
    settings: Sequence[SettingVerdict] = (),
) -> CompatibilityVerdict:
    """The verdict of the two trials (see the module doc). ``old_operators``: the stateful
    operators the old version recorded (None when it recorded none: then only Spark's errors
    count). A failure of the in-place trial names its rule; a failure of the migrated trial means
    the new version does not start at all. ``settings``: the fixed settings the new version
    changes (judged before the trials); one that needs a new checkpoint decides the in-place
    answer, and ``in_place`` is then None (not run)."""
    verdict = _classify(in_place, migrated, old_operators=old_operators, settings=tuple(settings))
    return replace(verdict, settings=tuple(settings))


def settings_verdict(settings: Sequence[SettingVerdict], migrated: TrialResult | None) -> CompatibilityVerdict | None:
    """The verdict when a fixed setting already needs a new checkpoint (no in-place trial is
    needed), else None. The migrated trial still says whether the new version starts."""
    decisive = next((s for s in settings if s.needs_new_checkpoint), None)
    if decisive is None:
        return None
    migrated_ok = None if migrated is None else migrated.started
    failed = migrated is not None and migrated.started is False
    return CompatibilityVerdict(
        in_place_ok=False, migrated_ok=migrated_ok, rule=Rule.FIXED_SETTING, operator=decisive.setting.value,
        old=decisive.old, new=decisive.new,
        error_class=migrated.error_class if failed and migrated else decisive.spark_error.split(" ")[0],
        driver_error=migrated.error_message if failed and migrated else "",
        log_tail=migrated.log_tail if failed and migrated else "",
        trials=() if migrated is None else (migrated,), settings=tuple(settings))


def _classify(
    in_place: TrialResult | None,
    migrated: TrialResult | None,
    *,
    old_operators: Sequence[StatefulOperator] | None,
    settings: tuple[SettingVerdict, ...],
) -> CompatibilityVerdict:
    decided = settings_verdict(settings, migrated)
    if decided is not None:
        return replace(decided, trials=tuple(t for t in (in_place, migrated) if t is not None))
    if in_place is None:
        raise ValueError("no in-place trial and no fixed setting that decides it")
    trials = (in_place,) if migrated is None else (in_place, migrated)
    migrated_ok = None if migrated is None else (migrated.started if migrated.started is not None else None)
    if migrated is not None and migrated.started is False:
        return CompatibilityVerdict(
            in_place_ok=False if in_place.started is False else in_place.started, migrated_ok=False,
            rule=_rule_of(in_place), error_class=migrated.error_class, driver_error=migrated.error_message,
            log_tail=migrated.log_tail, trials=trials)
    if in_place.started is False:
        failure = read_failure(in_place.error_message) or SparkFailure(in_place.error_class, in_place.error_message,
                                                                      Rule.UNKNOWN)
        return CompatibilityVerdict(in_place_ok=False, migrated_ok=migrated_ok, rule=failure.rule,
                                    operator=failure.operator, old=failure.old, new=failure.new,
                                    error_class=failure.error_class or in_place.error_class,
                                    driver_error=in_place.error_message, log_tail=in_place.log_tail, trials=trials)
    if in_place.started is None:
        return CompatibilityVerdict(in_place_ok=None, migrated_ok=migrated_ok, trials=trials)
    if old_operators is not None and in_place.operators is not None:
        found = compare_operators(old_operators, in_place.operators)
        if found is not None:
            return CompatibilityVerdict(in_place_ok=False, migrated_ok=migrated_ok, rule=found.rule,
                                        operator=found.operator, old=found.old, new=found.new, trials=trials)
    return CompatibilityVerdict(in_place_ok=True, migrated_ok=migrated_ok, trials=trials)


def _rule_of(trial: TrialResult) -> Rule | None:
    if trial.started is not False:
        return None
    failure = read_failure(trial.error_message)
    return failure.rule if failure else Rule.UNKNOWN


# -- refusals before a trial -------------------------------------------------------------------------


def _norm(uri: str) -> str:
    text = uri.strip().rstrip("/")
    if text.startswith("file://"):
        text = text[len("file://"):]
    return posixpath.normpath(text) if "://" not in text else text


def check_trial_location(trial_root: str, live: Mapping[str, str]) -> None:
    """Refuse (:class:`TrialRefused`) a trial location that equals, contains or lies inside any
    location the live job or the upgrade uses (``live``: what -> URI; empty URIs are ignored)."""
    trial = _norm(trial_root)
    for what, uri in live.items():
        if not uri:
            continue
        other = _norm(uri)
        if trial == other or trial.startswith(other + "/") or other.startswith(trial + "/"):
            raise TrialRefused(found=f"trial location {trial_root} overlaps the {what} {uri}",
                               expected="a trial location apart from every live checkpoint and sink",
                               path=trial_root)


#: Python source names (module or function) whose use declares the trial contract.
CONTRACT_NAMES = ("sink_location", "GracefulStop")


def declares_contract(sources: Mapping[str, str], application: str) -> None:
    """Refuse (:class:`TrialRefused`) a Python job whose source (``sources``: file -> text, the
    application and the local modules it imports) does not use every name of
    :data:`CONTRACT_NAMES`: its trial could write to the live sink or never stop."""
    text = "\n".join(sources.values())
    missing = [name for name in CONTRACT_NAMES if not re.search(rf"\b{name}\b", text)]
    if missing:
        raise TrialRefused(
            found=f"{application} (and the modules next to it that it imports) never uses {', '.join(missing)}",
            expected="a job following the trial contract: every output location from "
                     "airflow_ckpt_provider.spark.sink_location(spark, default) and the query run by GracefulStop",
            path=application)


def local_imports(text: str) -> list[str]:
    """Module names a Python source imports at top level (``import a``, ``from a import b``)."""
    return re.findall(r"^(?:from|import)\s+([A-Za-z_][A-Za-z0-9_]*)", text, re.M)


__all__ = ["CONTRACT_NAMES", "DRIVER_FILES_FORMAT", "ERROR_CLASS_RULES", "SKIPPED_KEY", "CompatibilityResult",
           "CompatibilitySkipped", "CompatibilityVerdict", "Rule", "SparkFailure", "StatefulOperator",
           "StatefulOperators", "TrialKind", "TrialRecord", "TrialResult",
           "check_trial_location", "classify", "compare_operators", "compatibility_result", "declares_contract",
           "local_imports", "read_failure", "settings_verdict", "spark_error"]
