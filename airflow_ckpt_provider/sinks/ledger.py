"""The sink ledger: what the sink's own record says it holds, before the stop and after the switch.

:func:`assess_sink` and :func:`judge_delivery` are pure decisions over values;
:func:`inspect_sink` and :func:`verify_sink` read the sink's record (:class:`~.delta.DeltaLog`)
and call them.

* Preflight (:func:`inspect_sink`): a sink that is not declared is refused (:class:`UndeclaredSink`)
  unless the trigger accepts it, and the finding then says what that means. For a file sink, the
  batch ids of its ``_spark_metadata`` log (:func:`file_sink_batches`), which must follow the old
  checkpoint's (:func:`assess_file_sink`, :class:`FileSinkLocationMismatch`): a wrong location
  would make every batch the stop cuts count as absent. For Delta, the table's ``txn`` entries. A new version that
  writes with a CONSTANT txnAppId the table already recorded would have its batches 0..v skipped
  by Delta (its batch ids restart at 0): :class:`DeltaWritesSkipped`, before anything stops. The
  finding tells the approver whether the sink is exact or at-least-once, and the old query's last
  batch the table holds.
* Handover (:func:`sink_holds_batch`, :func:`account_cut`): a batch the stop cut (planned in
  ``offsets/M``, no ``commits/M``) may already be in the sink. A sink the provider reads says so
  itself (Delta: ``txn(old appId, M)``; file sink: ``_spark_metadata/M``): when it holds the batch
  whole the new version starts after it, else the sink holds none of it (both record a batch
  atomically) and the new version processes it once. Any other sink may hold part of it: the
  :class:`SinkAccount` names the input range, per partition, that may be processed twice.
* Verify (:func:`verify_sink`): every batch the new query committed (the first
  :data:`MAX_VERIFIED_BATCHES`) must be in the table's log as ``txn(new appId, batch)``; a
  batch the query committed and the table does not hold fails the upgrade
  (:class:`SinkNotDelivered`), which rolls back before the old checkpoint is archived.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    DeltaWritesSkipped,
    FileSinkLocationMismatch,
    InvalidStepResult,
    SinkDeclarationMismatch,
    SinkNotDelivered,
    UndeclaredSink,
)
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import Codec, Field, array_of, one_of
from airflow_ckpt_provider.sinks.delta import DeltaLog, DeltaTxn
from airflow_ckpt_provider.sinks.spec import SinkKind, SinkSpec
from airflow_ckpt_provider.storage.files import check_no_links, is_local
from airflow_ckpt_provider.storage.listing import list_names

#: How many of the new query's committed batches verify looks for in the sink's log.
MAX_VERIFIED_BATCHES = 50
#: How many of the newest Delta commits verify reads to find them.
MAX_SCANNED_COMMITS = 1000


@dataclass(frozen=True)
class SinkFinding:
    """The preflight's finding: whether the sink is ``exact`` (the provider reads its record),
    the table version read, the old query's appId and the last of its batches the sink holds,
    whether the trigger accepted a sink that is not declared (``accepted_undeclared``), and the
    approver's line (Markdown)."""

    spec: SinkSpec
    exact: bool
    line: str
    table_version: int | None = None
    old_app_id: str | None = None
    old_last_batch: int | None = None
    accepted_undeclared: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"sink": self.spec.to_dict(), "exact": self.exact, "line": self.line,
                "table_version": self.table_version, "old_app_id": self.old_app_id,
                "old_last_batch": self.old_last_batch, "accepted_undeclared": self.accepted_undeclared}


@dataclass(frozen=True)
class SinkDelivery:
    """Verify's finding: the new query's batches the sink holds, by table version."""

    spec: SinkSpec
    app_id: str | None
    batches: Mapping[int, int] = field(default_factory=dict)
    checked: bool = False
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"sink": self.spec.to_dict(), "app_id": self.app_id, "checked": self.checked,
                "batches": {str(b): v for b, v in sorted(self.batches.items())}, "note": self.note}


def assess_sink(spec: SinkSpec, *, txns: Mapping[str, DeltaTxn], table_version: int | None,
                old_query_id: str | None, uri: str, old_committed_batch: int | None = None) -> SinkFinding:
    """Decide the preflight's sink finding from the table's latest ``txn`` per appId (Delta kinds).

    Raises :class:`DeltaWritesSkipped` when the new version writes with a constant txnAppId that
    the table recorded at version >= 0: Delta would skip its batches up to that version; and
    :class:`SinkDeclarationMismatch` when the old query committed batches (up to
    ``old_committed_batch``) and the table records none under the appId the declaration implies:
    the job writes otherwise than declared, and what the new version's writes do cannot be told."""
    if not spec.declared:
        return undeclared_finding(spec, accept_undeclared_sink=True)
    if spec.kind is SinkKind.FILE:
        return SinkFinding(spec, exact=True, line=(
            f"**Sink:** file sink at `{spec.location}`: the new version must write where no `_spark_metadata` "
            "is (checked), so none of its batches is skipped."))
    if not spec.kind.is_delta:
        return SinkFinding(spec, exact=False, line=(
            f"**Sink: at-least-once** ({spec.kind}): the provider cannot read what this sink holds; a batch the "
            "stop cuts may be written again (the report names its input range)."))
    constant = spec.constant_new_app_id
    if constant and constant in txns and txns[constant].version >= 0:
        recorded = txns[constant]
        raise DeltaWritesSkipped(
            found=(f"the Delta table records txnAppId {constant!r} at txnVersion {recorded.version} (table version "
                   f"{recorded.table_version}), and the new version writes with the same txnAppId: Delta would skip "
                   f"its batches 0-{recorded.version}"),
            expected="a txnAppId the table has not recorded for the new version (its batch ids start at 0)",
            path=uri)
    old_app_id = spec.old_app_id(old_query_id)
    old = txns.get(old_app_id) if old_app_id else None
    if old is None and old_app_id and old_committed_batch is not None:
        others = sorted(txns, key=lambda app: -txns[app].table_version)
        listed = (f"it records txns of {len(others)} other appId(s): " + ", ".join(
            f"{app!r} at version {txns[app].version}" for app in others[:5]) if others else "it records no txn at all")
        which = "the checkpoint's query id" if old_app_id == old_query_id else "the declared txn_app_id"
        raise SinkDeclarationMismatch(
            found=(f"the old query committed batches up to {old_committed_batch}, and the Delta table records no "
                   f"txn for appId {old_app_id!r} ({which}); {listed}"),
            expected=(f"txn({old_app_id!r}, version <= {old_committed_batch}) in the table's log, as "
                      f"{spec.describe()} writes"),
            path=uri)
    held = (f"the old query's last batch in the table: {old.version} (table version {old.table_version})"
            if old else "the table records no batch of the old query yet")
    new_id = f"txnAppId `{constant}`" if constant else "the new query's id"
    return SinkFinding(spec, exact=True, table_version=table_version, old_app_id=old_app_id,
                       old_last_batch=old.version if old else None, line=(
                           f"**Sink:** {spec.describe()}: exact — the table records every batch by appId and "
                           f"batch id; {held}. The new version writes under {new_id}; verify checks the table "
                           "holds its batches."))


#: The most ``_spark_metadata`` entries the preflight lists (Spark compacts the log every 10
#: batches and deletes what it compacted, so a file sink's log holds far fewer).
MAX_FILE_SINK_ENTRIES = 100_000
#: How many bytes of the newest ``_spark_metadata`` entry the preflight reads (its version line).
FILE_SINK_HEAD_BYTES = 64


def undeclared_finding(spec: SinkSpec, *, accept_undeclared_sink: bool) -> SinkFinding:
    """The finding for a sink that is not declared: refused (:class:`UndeclaredSink`) unless
    ``accept_undeclared_sink``; then the approver's line says plainly what that consent means."""
    if spec.declared:
        raise ValueError("undeclared_finding is for a sink that is not declared")
    if not accept_undeclared_sink:
        raise UndeclaredSink(
            found="an empty sink declaration (the `sink` param) and accept_undeclared_sink false",
            expected="the job's sink declared (delta, delta_foreach_batch, file, kafka or foreach_batch), or "
                     "accept_undeclared_sink true")
    return SinkFinding(spec, exact=False, accepted_undeclared=True, line=(
        "**Sink: not declared, accepted** (`accept_undeclared_sink`): the provider cannot read what the sink "
        "holds, so the sink may skip or duplicate a batch the stop cuts (a Delta writer with a constant txnAppId "
        "may skip every batch of the new version); exactness is NOT proven, and the report says so."))


def assess_file_sink(spec: SinkSpec, *, metadata_batches: Sequence[int] | None, committed_batch: int | None,
                     planned_batch: int | None, uri: str) -> SinkFinding:
    """Decide the preflight's finding for a file sink from the batch ids its ``_spark_metadata``
    log names (None: no log there), the old checkpoint's last committed batch and its last planned
    one. Spark's file sink records batch N in its log before Spark writes ``commits/N``, so at
    ``location`` the newest logged batch lies between the two. :class:`FileSinkLocationMismatch`
    otherwise: a log missing while the old query committed batches, one that ends before the last
    commit (another query's output, or an old one) or past the last planned batch."""
    logged = max(metadata_batches) if metadata_batches else None
    if committed_batch is None and logged is None:
        return SinkFinding(spec, exact=True, line=(
            f"**Sink:** file sink at `{spec.location}`: the old query committed no batch and its log is empty; "
            "the new version writes to `new_sink_path`, where no `_spark_metadata` is (checked)."))
    found = ""
    if logged is None:
        found = (f"no _spark_metadata log at {uri}" if metadata_batches is None
                 else f"an empty _spark_metadata log at {uri}")
        found += f", and the old query committed batches up to {committed_batch}"
    elif committed_batch is not None and logged < committed_batch:
        found = (f"_spark_metadata at {uri} ends at batch {logged}, before the old query's last committed batch "
                 f"{committed_batch}")
    elif planned_batch is not None and logged > planned_batch:
        found = (f"_spark_metadata at {uri} ends at batch {logged}, past the old query's last planned batch "
                 f"{planned_batch}")
    if found:
        low = "-1" if committed_batch is None else str(committed_batch)
        raise FileSinkLocationMismatch(
            found=found, path=uri,
            expected=(f"the old version's output path, whose _spark_metadata ends at a batch from {low} to "
                      f"{planned_batch if planned_batch is not None else low} (the old checkpoint's last committed "
                      "and last planned batch)"))
    return SinkFinding(spec, exact=True, old_last_batch=logged, line=(
        f"**Sink:** file sink at `{spec.location}`: exact — its `_spark_metadata` log records the old query's "
        f"batches up to {logged}, as the old checkpoint does; the new version writes to `new_sink_path`, where no "
        "`_spark_metadata` is (checked), so none of its batches is skipped."))


def _file_sink_batch(name: str) -> int | None:
    """The batch id a ``_spark_metadata`` entry names (``N`` or ``N.compact``), None for anything
    else (Hadoop's ``.N.crc``, temporary files)."""
    base = name.rsplit("/", 1)[-1]
    if base.endswith(".compact"):
        base = base[: -len(".compact")]
    if not base.isdigit() or (len(base) > 1 and base.startswith("0")):
        return None
    return int(base)


def file_sink_batches(fs: AbstractFileSystem, path: str, *, uri: str | None = None) -> list[int] | None:
    """The batch ids the file sink log ``<path>/_spark_metadata`` names, sorted; None when there is
    no log. Lists names only (at most :data:`MAX_FILE_SINK_ENTRIES`), never follows a link out of
    ``path`` on a local disk (:class:`UnsafeEntry`), and reads only the first
    :data:`FILE_SINK_HEAD_BYTES` of the newest entry, which must be a version line (``v1``):
    :class:`FileSinkLocationMismatch` otherwise."""
    folder = f"{path.rstrip('/')}/_spark_metadata"
    where = f"{(uri or path).rstrip('/')}/_spark_metadata"
    if is_local(fs) and fs.exists(path):
        local = fs._strip_protocol(path)
        check_no_links(local, f"{local.rstrip('/')}/_spark_metadata")
    try:
        names = list_names(fs, folder)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(names) > MAX_FILE_SINK_ENTRIES:
        raise FileSinkLocationMismatch(found=f"{len(names):,} entries in {where}",
                                       expected=f"a file sink log of at most {MAX_FILE_SINK_ENTRIES:,} entries",
                                       path=uri or path)
    named = {batch: name for name in names if (batch := _file_sink_batch(str(name))) is not None}
    if not named:
        return []
    newest = named[max(named)]
    head = _head(fs, str(newest), FILE_SINK_HEAD_BYTES)
    if not head.startswith(b"v") or not head[1:].split(b"\n", 1)[0].strip().isdigit():
        raise FileSinkLocationMismatch(found=f"{where}/{newest.rsplit('/', 1)[-1]} starting {head[:16]!r}",
                                       expected="a file sink log entry starting with its version line (v1)",
                                       path=uri or path)
    return sorted(named)


def _head(fs: AbstractFileSystem, path: str, size: int) -> bytes:
    """The first ``size`` bytes of ``path`` (on a local disk through no link, never a FIFO)."""
    if is_local(fs):
        import os

        from airflow_ckpt_provider.storage.files import open_regular

        fd = open_regular(fs._strip_protocol(path))
        try:
            return os.read(fd, size)
        finally:
            os.close(fd)
    with fs.open(path, "rb") as handle:
        return bytes(handle.read(size))


def judge_delivery(spec: SinkSpec, *, app_id: str, committed: Sequence[int], recorded: Mapping[int, int],
                   latest: DeltaTxn | None, uri: str) -> SinkDelivery:
    """Every batch in ``committed`` (the new query's) must be in ``recorded`` (batch -> table
    version of its ``txn``); else :class:`SinkNotDelivered` naming the batches."""
    missing = [b for b in committed if b not in recorded]
    if missing:
        why = (f"; the table's latest txn for {app_id!r} is version {latest.version} (table version "
               f"{latest.table_version}), so Delta skipped the new query's lower batch ids"
               if latest is not None and latest.version >= max(missing) else "")
        raise SinkNotDelivered(
            found=(f"the new query committed batch(es) {_list(missing)} and the Delta table holds no txn for "
                   f"appId {app_id!r} at those versions{why}"),
            expected=f"txn({app_id!r}, batch) in the table's log for every committed batch of the new query",
            path=uri)
    return SinkDelivery(spec, app_id=app_id, batches={b: recorded[b] for b in committed}, checked=True)


def inspect_sink(fs: AbstractFileSystem | None, path: str, spec: SinkSpec, *, old_query_id: str | None,
                 uri: str | None = None, old_committed_batch: int | None = None,
                 old_planned_batch: int | None = None, accept_undeclared_sink: bool = True) -> SinkFinding:
    """The preflight's :class:`SinkFinding`: a sink that is not declared is refused unless
    ``accept_undeclared_sink`` (:func:`undeclared_finding`); reads a file sink's ``_spark_metadata``
    log (:func:`file_sink_batches`, :func:`assess_file_sink`) and the Delta log for Delta kinds."""
    if not spec.declared:
        return undeclared_finding(spec, accept_undeclared_sink=accept_undeclared_sink)
    if spec.kind is SinkKind.FILE and fs is not None:
        return assess_file_sink(spec, metadata_batches=file_sink_batches(fs, path, uri=uri),
                                committed_batch=old_committed_batch, planned_batch=old_planned_batch,
                                uri=uri or path)
    if not spec.kind.is_delta or fs is None:
        return assess_sink(spec, txns={}, table_version=None, old_query_id=old_query_id, uri=uri or path)
    delta = DeltaLog(fs, path, uri=uri)
    listing = delta.listing()
    txns = delta.transactions(listing)
    return assess_sink(spec, txns=txns, table_version=listing.latest, old_query_id=old_query_id,
                       uri=uri or path, old_committed_batch=old_committed_batch)


def verify_sink(fs: AbstractFileSystem | None, path: str, spec: SinkSpec, *, new_query_id: str | None,
                committed: Sequence[int], old_query_id: str | None = None, handover_batch: int | None = None,
                uri: str | None = None) -> SinkDelivery:
    """Verify's :class:`SinkDelivery`: the sink holds the new query's first committed batches
    (Delta kinds; other kinds are not checked and say so).

    When both versions write under the same appId (a constant txnAppId), a ``txn`` whose version
    is at most the handover batch is the OLD query's: Delta records an appId's versions in
    increasing order, so the new query's batches up to that id can never be recorded; the scan
    stops there."""
    app_id = spec.new_app_id(new_query_id)
    if not spec.kind.is_delta or fs is None or not app_id:
        note = "not checked: the provider cannot read this sink's record" if spec.declared else "no sink declared"
        return SinkDelivery(spec, app_id=app_id, note=note)
    shared = app_id == spec.old_app_id(old_query_id)
    wanted = sorted(committed)[:MAX_VERIFIED_BATCHES]
    delta = DeltaLog(fs, path, uri=uri)
    recorded: dict[int, int] = {}
    latest: DeltaTxn | None = None
    for txn in delta.recent_txns(app_id, max_commits=MAX_SCANNED_COMMITS):
        latest = latest or txn
        if shared and handover_batch is not None and txn.version <= handover_batch:
            break
        if txn.version in wanted:
            recorded.setdefault(txn.version, txn.table_version)
        if len(recorded) == len(wanted):
            break
    return judge_delivery(spec, app_id=app_id, committed=wanted, recorded=recorded, latest=latest, uri=uri or path)


@dataclass(frozen=True)
class OffsetRange:
    """Input records ``[start, end)`` of one Kafka partition (``start`` -2: from the earliest)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int | None:
        """How many records (None when the start is the earliest, not an offset)."""
        return None if self.start < 0 else self.end - self.start

    def describe(self) -> str:
        start = "earliest" if self.start < 0 else str(self.start)
        count = "" if self.count is None else f" ({self.count:,} records)"
        return f"{self.topic}-{self.partition} [{start}, {self.end}){count}"

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end,
                "count": self.count}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OffsetRange:
        """From :meth:`to_dict` through its codec (``count`` derived: checked, recomputed)."""
        return cls(**_RANGE.decode(data))


def cut_ranges(committed: KafkaOffsets, planned: KafkaOffsets) -> tuple[OffsetRange, ...]:
    """The input of a cut batch per partition: from where the last committed batch ended
    (``committed``; a partition it did not know: the earliest) to the cut batch's planned end."""
    ranges = []
    for topic, partition, end in planned.items():
        start = committed.offsets.get(topic, {}).get(partition, -2)
        if end > max(start, 0):
            ranges.append(OffsetRange(topic, partition, start, end))
    return tuple(ranges)


class CutDisposition(StrEnum):
    NONE = "none"              # the stop cut no batch
    HELD = "held"              # the sink holds the cut batch whole: the new version starts after it
    NOT_HELD = "not_held"      # the sink holds none of it: the new version processes it once
    MAY_REPEAT = "may_repeat"  # an at-least-once sink may hold part of it: processed again by the new version
    COUNTED = "counted"        # a Kafka sink's output topic holds (part of) it, counted by source header: written twice


@dataclass(frozen=True)
class SinkAccount:
    """What the switch means for the sink: the batch the stop cut (if any), what the sink holds of
    it and why, and per partition the input ranges the sink may receive twice (``twice``) or never
    (``skipped``). Both are empty for a sink the provider reads (Delta, file sink): its own
    record decides where the new version starts. ``record`` names that record."""

    disposition: CutDisposition
    why: str
    cut_batch: int | None = None
    record: str | None = None
    twice: tuple[OffsetRange, ...] = ()
    skipped: tuple[OffsetRange, ...] = ()

    @property
    def exact(self) -> bool:
        return not self.twice and not self.skipped

    def lines(self) -> list[str]:
        """For the log and the report: the why, then one line per range."""
        out = [self.why]
        twice = "processed twice" if self.disposition is CutDisposition.COUNTED else "may be processed twice"
        out += [f"{twice}: {r.describe()}" for r in self.twice]
        out += [f"skipped: {r.describe()}" for r in self.skipped]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"disposition": str(self.disposition), "why": self.why, "cut_batch": self.cut_batch,
                "record": self.record, "exact": self.exact, "twice": [r.to_dict() for r in self.twice],
                "skipped": [r.to_dict() for r in self.skipped]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SinkAccount:
        """From :meth:`to_dict` through its codec (a part of the step result that carries it, whose
        format number covers it); :class:`InvalidStepResult` otherwise."""
        return cls(**_ACCOUNT.decode(data))


def _runs(topic: str, partition: int, offsets: Sequence[int]) -> list[OffsetRange]:
    """Sorted distinct ``offsets`` of one partition as contiguous ranges."""
    runs: list[OffsetRange] = []
    for offset in offsets:
        if runs and runs[-1].end == offset:
            runs[-1] = OffsetRange(topic, partition, runs[-1].start, offset + 1)
        else:
            runs.append(OffsetRange(topic, partition, offset, offset + 1))
    return runs


def account_cut(spec: SinkSpec, *, cut_batch: int | None, committed: KafkaOffsets | None,
                planned: KafkaOffsets | None, record: str | None,
                seen: Collection[tuple[str, int, int]] | None = None, held_at_gate: bool = False) -> SinkAccount:
    """Decide what the sink holds of the batch the stop cut (``cut_batch``, planned up to
    ``planned``, after the last committed batch's ``committed`` end; None: the stop cut none).
    ``record`` is the sink's own proof that it holds the batch whole (:func:`sink_holds_batch`),
    or for a ``foreachBatch`` writer the provider's wrapper's delivery record (:func:`delivered_record`);
    ``seen`` the input records a Kafka sink's output topic names by their source header
    (:mod:`airflow_ckpt_provider.source_header`) in a window that covers the cut batch and the one
    before it: when any is seen, the cut batch's share of them is exactly what the new version
    writes twice; when none is (the job writes no such header), the account stays at-least-once.
    ``held_at_gate``: the driver acknowledged the stop by holding ``cut_batch`` at the
    ``foreach_batch`` gate, before the job's function ran: no sink holds any of it."""
    if cut_batch is None:
        return SinkAccount(CutDisposition.NONE, "the stop cut no batch: the old query committed every batch it "
                                                "planned, so the sink holds nothing beyond the handover")
    if held_at_gate and record is None:
        return SinkAccount(CutDisposition.NOT_HELD, cut_batch=cut_batch, why=(
            f"the stop held batch {cut_batch} at the foreach_batch gate before the job's function ran: the sink holds "
            f"none of it, and the new version processes it once"))
    if record is not None and not spec.kind.exact and spec.kind is not SinkKind.KAFKA:  # the wrapper's record
        return SinkAccount(CutDisposition.HELD, cut_batch=cut_batch, record=record, why=(
            f"the stop cut batch {cut_batch} after the job's foreachBatch function returned for it ({record}): the "
            f"sink has it whole, so the new version starts after it"))
    if spec.kind.exact:
        if record is not None:
            return SinkAccount(CutDisposition.HELD, cut_batch=cut_batch, record=record, why=(
                f"the stop cut batch {cut_batch} after the sink recorded it ({record}): the sink holds it whole, "
                f"so the new version starts after it"))
        return SinkAccount(CutDisposition.NOT_HELD, cut_batch=cut_batch, why=(
            f"the stop cut batch {cut_batch} before the sink recorded it: the sink records a batch atomically "
            f"({spec.kind}), so it holds none of it and the new version processes it once"))
    ranges = cut_ranges(committed, planned) if committed is not None and planned is not None else ()
    if spec.kind is SinkKind.KAFKA and seen:
        twice: list[OffsetRange] = []
        for cut in ranges:
            low = max(cut.start, 0)
            hits = sorted({o for t, p, o in seen if t == cut.topic and p == cut.partition and low <= o < cut.end})
            twice += _runs(cut.topic, cut.partition, hits)
        count = sum(r.end - r.start for r in twice)
        return SinkAccount(CutDisposition.COUNTED, cut_batch=cut_batch, twice=tuple(twice),
                           record=f"{count} record(s) of batch {cut_batch} in {spec.location}, by their source header",
                           why=(f"the stop cut batch {cut_batch}: the output topic {spec.location} already holds "
                                f"{count:,} record(s) of its input (counted by their source header), and the new "
                                f"version writes them again"))
    what = spec.kind.value if spec.declared else "a sink that is not declared"
    return SinkAccount(CutDisposition.MAY_REPEAT, cut_batch=cut_batch, twice=ranges, why=(
        f"the stop cut batch {cut_batch}: {what} is at-least-once (the provider cannot read what it holds), so "
        f"it may hold part of that batch, and the new version processes the batch's input again"))


def sink_holds_batch(fs: AbstractFileSystem | None, path: str, spec: SinkSpec, *, old_query_id: str | None,
                     batch: int, uri: str | None = None) -> str | None:
    """The sink's own record that it holds the old query's ``batch`` whole, as a sentence, else None:
    Delta — ``txn(old appId, version >= batch)`` in the table's current snapshot; file sink —
    ``_spark_metadata/<batch>`` (or its ``.compact``) in the output path. None for any other sink."""
    if fs is None or not spec.declared:
        return None
    if spec.kind.is_delta:
        app_id = spec.old_app_id(old_query_id)
        if not app_id:
            return None
        txn = DeltaLog(fs, path, uri=uri).transactions().get(app_id)
        if txn is None or txn.version < batch:
            return None
        return f"Delta txn appId {app_id} version {txn.version} at table version {txn.table_version}"
    if spec.kind is SinkKind.FILE:
        for name in (str(batch), f"{batch}.compact"):
            entry = f"{path.rstrip('/')}/_spark_metadata/{name}"
            if fs.exists(entry):
                return f"file sink metadata _spark_metadata/{name}"
    return None


def delivered_record(delivered_batch: int | None, batch: int) -> str | None:
    """The proof that a ``foreachBatch`` job's function returned for ``batch``, from the last
    batch the provider's wrapper recorded as delivered (``_ckpt/delivered.json``), else None."""
    if delivered_batch is None or delivered_batch < batch:
        return None
    return f"the foreach_batch wrapper recorded batch {delivered_batch} as delivered"


def _list(numbers: Sequence[int]) -> str:
    shown = ", ".join(map(str, numbers[:12]))
    return shown + (f" and {len(numbers) - 12} more" if len(numbers) > 12 else "")


# -- the codecs (airflow_ckpt_provider.records.codec): parts of a step's result ---------------------

_RANGE = Codec("offset range", InvalidStepResult, {
    "topic": Field((str,)), "partition": Field((int,)), "start": Field((int,)), "end": Field((int,)),
    "count": Field((int,), required=False, nullable=True, derived=True),
}, version=None)
_ACCOUNT = Codec("sink account", InvalidStepResult, {
    "disposition": Field((str,), decode=one_of(*CutDisposition, decode=CutDisposition)),
    "why": Field((str,)),
    "cut_batch": Field((int,), required=False, nullable=True),
    "record": Field((str,), required=False, nullable=True),
    "exact": Field((bool,), required=False, derived=True),
    "twice": Field((list,), required=False, default=(), decode=array_of(dict, decode=OffsetRange.from_dict)),
    "skipped": Field((list,), required=False, default=(), decode=array_of(dict, decode=OffsetRange.from_dict)),
}, version=None)
