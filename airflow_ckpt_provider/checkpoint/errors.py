"""Typed errors of the provider, one family built from keyword fields; pure (no I/O).

Every error is a :class:`ProviderError`: what was ``found``, what was ``expected``, the ``action``
to take (each class has a default action), optionally the ``path`` it concerns and a multi-line
``detail`` (a command's output tail). ``str(error)`` reads
``"<summary>[ (<path>)]: found <found>; expected <expected>. <action>[\\n<detail>]"`` so the command
line and the Airflow task log show one self-explaining line; each field is cut to
:data:`MAX_FIELD_CHARS` (the detail to :data:`MAX_DETAIL_CHARS`, keeping its end) and the full text
of an error that was cut is logged at DEBUG when it is made. :class:`CheckpointError` covers the
checkpoint, the handover, the broker and the upgrade steps; the embedded local stack's errors
(:class:`~airflow_ckpt_provider.local.errors.LocalStackError`: Java, Maven, the dev stack's Kafka
broker, ports) live with that stack in :mod:`airflow_ckpt_provider.local.errors`. Every error pickles with its fields
(Airflow and multiprocessing send errors across processes).
"""

from __future__ import annotations

import errno
import logging
import re
from dataclasses import dataclass
from typing import ClassVar

from airflow_ckpt_provider.checkpoint.secrets import redact_location
from airflow_ckpt_provider.records.codec import TypedError

log = logging.getLogger(__name__)

#: the longest found / expected / action / path shown in an error line (the middle is cut)
MAX_FIELD_CHARS = 1000
#: the longest multi-line detail shown (a command's output tail: its end is kept)
MAX_DETAIL_CHARS = 20_000


def shorten(text: str, limit: int = MAX_FIELD_CHARS, *, keep_end: bool = False) -> str:
    """``text`` cut to about ``limit`` characters: the middle (or, ``keep_end``, the start) is
    replaced by a note of how much was cut. Pure; used for every error line."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep_end:
        return f"[{cut:,} characters cut]...{text[-limit:]}"
    half = limit // 2
    return f"{text[:half]}...[{cut:,} characters cut]...{text[-(limit - half):]}"


class ProviderError(TypedError):
    """Base of every error this provider raises on purpose (see the module docstring); a
    :class:`~airflow_ckpt_provider.records.codec.TypedError`, so the codec recognises it."""

    summary: ClassVar[str] = "error"
    default_action: ClassVar[str] = "Nothing was changed; fix the cause and retry."

    def __init__(
        self,
        *,
        found: str,
        expected: str,
        action: str | None = None,
        path: str | None = None,
        detail: str = "",
    ) -> None:
        self.found = found
        self.expected = expected
        self.action = action if action is not None else self.default_action
        self.path = path
        self.detail = detail
        Exception.__init__(self, str(self))
        if len(self.full_text()) > len(str(self)):
            log.debug("%s (in full): %s", type(self).__name__, self.full_text())

    def _where(self) -> str:
        return f" ({shorten(self.path)})" if self.path else ""

    def reason(self) -> str:
        """What went wrong in one line for people, without the expectation, the action or the
        detail: ``"<summary>: <found>"`` (credentials masked), e.g. the reason a refusal records."""
        return redact_location(f"{self.summary}: {shorten(self.found)}")

    def full_text(self) -> str:
        """The message with no field cut (for the log; :meth:`__str__` is what users see); locations'
        credentials masked like every error line (:func:`~airflow_ckpt_provider.checkpoint.secrets.redact_location`)."""
        text = f"{self.summary}{self._where()}: found {self.found}; expected {self.expected}. {self.action}"
        return redact_location(f"{text}\n{self.detail}" if self.detail else text)

    def __str__(self) -> str:
        text = (f"{self.summary}{self._where()}: found {shorten(self.found)}; expected {shorten(self.expected)}. "
                f"{shorten(self.action)}")
        return redact_location(f"{text}\n{shorten(self.detail, MAX_DETAIL_CHARS, keep_end=True)}" if self.detail
                               else text)


@dataclass(frozen=True)
class ErrorLine:
    """A typed error's line (``str(error)``, as the upgrade journal keeps a failed step's error) read
    back into its fields for a report to show them apart (:func:`read_error_line`). ``summary`` is
    "" for a codec's :class:`~airflow_ckpt_provider.records.codec.TypedError`, which has none."""

    summary: str
    found: str
    expected: str
    action: str
    path: str = ""
    detail: str = ""


_FOUND = "found "
_EXPECTED = "; expected "
#: where the expectation ends and the action begins: the first sentence end after ``expected``
_ACTION_START = re.compile(r"\. (?=[A-Z`\"'(])")


def read_error_line(text: str) -> ErrorLine | None:
    """The fields of ``text`` when it is one typed error's line as :meth:`ProviderError.__str__`
    (``<summary>[ (<path>)]: found <found>; expected <expected>. <action>[\\n<detail>]``) or
    :meth:`TypedError.__str__ <airflow_ckpt_provider.records.codec.TypedError.__str__>` writes it,
    perhaps cut at its end (the journal keeps 2,000 characters of it). The action starts at the
    first sentence end after ``; expected`` (an expectation is one phrase); a line cut before it has
    an empty action. None for any other text (an exception of another kind, an interrupted step's
    words), and for a line whose fields cannot be told apart for sure: no summary before
    ``: found``, or more than one ``; expected`` (an error that quotes another). Pure."""
    if text.startswith(_FOUND):
        head, rest = "", text[len(_FOUND):]
    else:
        head, sep, rest = text.partition(": " + _FOUND)
        if not sep or not head.strip() or "\n" in head:
            return None
    if rest.count(_EXPECTED) != 1:
        return None
    found, _, tail = rest.partition(_EXPECTED)
    body, _, detail = tail.partition("\n")
    end = _ACTION_START.search(body)
    expected, action = (body[:end.start()], body[end.end():]) if end else (body.removesuffix("."), "")
    summary, path = head, ""
    if head.endswith(")") and " (" in head:
        summary, _, path = head[:-1].partition(" (")
    return ErrorLine(summary=summary, found=found, expected=expected, action=action, path=path, detail=detail)


class CheckpointError(ProviderError):
    """Something about a checkpoint, a handover, a broker or an upgrade step prevents a safe answer."""

    summary = "checkpoint error"


class CheckpointNotFound(CheckpointError):
    summary = "checkpoint not found"
    default_action = "Check the path or URL (and storage options); nothing was read."


class NotACheckpoint(CheckpointError):
    summary = "not a Spark checkpoint"
    default_action = "Point at the directory that holds metadata, offsets/ and commits/."


class UnreadableCheckpoint(CheckpointError):
    summary = "checkpoint cannot be read"
    default_action = "Check permissions and credentials for the checkpoint location."


class NoOffsets(CheckpointError):
    summary = "no offsets to hand over"
    default_action = (
        "Let the query commit at least one batch (or record its initial offsets) before the "
        "handover, or start the new query with explicit startingOffsets of your choice."
    )


class CommitWithoutOffsets(CheckpointError):
    summary = "commit without offsets"
    default_action = (
        "The offset log entry of the committed batch is missing; restore it from a backup or "
        "choose startingOffsets by hand. Do not guess: both loss and duplication are possible."
    )


class MissingCheckpointMetadata(CheckpointError):
    """A checkpoint with batches but no ``metadata`` file (the query id). Spark 4.2 refuses to
    restart it (``STREAMING_CHECKPOINT_MISSING_METADATA_FILE``); older Sparks give the query a new
    id, which breaks every sink that dedupes by query id."""

    summary = "checkpoint metadata file missing"
    default_action = (
        "Restore the metadata file ({\"id\":\"<the query id>\"}) from a backup or an archive of this "
        "checkpoint; nothing was read further or changed. Spark 4.2 will not restart the query without it."
    )


class CorruptCheckpointFile(CheckpointError):
    """A checkpoint file that cannot be trusted; ``line`` is 1-based when known."""

    summary = "corrupt checkpoint file"
    default_action = (
        "Stop the query if it still runs, then restore the file from a backup or repair it by "
        "hand; the handover was refused so nothing is lost."
    )

    def __init__(
        self,
        *,
        found: str,
        expected: str,
        path: str | None = None,
        line: int | None = None,
        action: str | None = None,
    ) -> None:
        self.line = line
        super().__init__(found=found, expected=expected, action=action, path=path)

    def _where(self) -> str:
        if not self.path:
            return f" (line {self.line})" if self.line else ""
        return f" ({shorten(self.path)}, line {self.line})" if self.line else f" ({shorten(self.path)})"


class UnsupportedLogVersion(CorruptCheckpointFile):
    """A log file whose version line is well formed but newer than this provider reads; Spark's
    own reader refuses it the same way ("UnsupportedLogVersion: maximum supported log version is
    v<maximum>, but encountered v<version>"). ``version`` is the version found, ``maximum`` the
    newest one supported (every version from v1 up to it is); the parsers always set both."""

    summary = "unsupported log version"
    default_action = (
        "Nothing was changed. The file was written by a newer Spark than this provider knows: upgrade "
        "airflow-ckpt-provider to a release that reads it, or take the handover by hand with that "
        "Spark's own reader."
    )

    def __init__(
        self,
        *,
        found: str,
        expected: str,
        version: int | None = None,
        maximum: int | None = None,
        path: str | None = None,
        line: int | None = None,
        action: str | None = None,
    ) -> None:
        self.version = version
        self.maximum = maximum
        super().__init__(found=found, expected=expected, path=path, line=line, action=action)


class InvalidOffsets(CheckpointError, ValueError):
    summary = "invalid Kafka offsets"
    default_action = 'Pass JSON shaped like {"topic": {"0": 23, "1": 7}} (-2 earliest, -1 latest).'


class InvalidHandover(CheckpointError, ValueError):
    summary = "invalid handover"
    default_action = "Use a handover produced by Handover.to_json() of this provider version."


class SourceNotKafka(CheckpointError):
    summary = "source is not Kafka"
    default_action = "Pass the index (or name) of a Kafka source; `ckpt inspect` lists them."


class AmbiguousSource(CheckpointError):
    summary = "several Kafka sources"
    default_action = "Choose one with --source N (or source=N); `ckpt inspect` lists them."


class UnknownTopic(CheckpointError):
    summary = "topic not on the broker"
    default_action = (
        "The topic was deleted or renamed (or the wrong cluster was given); restore it or choose "
        "startingOffsets by hand."
    )

    def __init__(
        self, *, topics: tuple[str, ...], found: str, expected: str, action: str | None = None
    ) -> None:
        self.topics = topics
        super().__init__(found=found, expected=expected, action=action)


class VanishedPartitions(CheckpointError):
    summary = "partitions vanished"
    default_action = (
        "Kafka cannot shrink a topic, so it was probably recreated; decide by hand where the new "
        "query must start."
    )

    def __init__(
        self, *, partitions: tuple[tuple[str, int], ...], found: str, expected: str, action: str | None = None
    ) -> None:
        self.partitions = partitions
        super().__init__(found=found, expected=expected, action=action)


class ExpiredOffsets(CheckpointError):
    """Offsets below the earliest retained offset; ``details`` holds (topic, partition, offset, earliest)."""

    summary = "offsets fell out of retention"
    default_action = (
        "Records between the handover and the earliest retained offset are gone; rerun with "
        "accept_data_loss (--accept-data-loss) to start at the earliest retained offsets."
    )

    def __init__(
        self,
        *,
        details: tuple[tuple[str, int, int, int], ...],
        found: str,
        expected: str,
        action: str | None = None,
    ) -> None:
        self.details = details
        super().__init__(found=found, expected=expected, action=action)


class OffsetsAheadOfBroker(CheckpointError):
    """Offsets above the latest offset; ``details`` holds (topic, partition, offset, latest)."""

    summary = "offsets ahead of the broker"
    default_action = (
        "The topic was probably deleted and recreated (or this is another cluster); decide by "
        "hand where the new query must start."
    )

    def __init__(
        self,
        *,
        details: tuple[tuple[str, int, int, int], ...],
        found: str,
        expected: str,
        action: str | None = None,
    ) -> None:
        self.details = details
        super().__init__(found=found, expected=expected, action=action)


class InvalidRollbackHandover(InvalidHandover):
    """A rollback handover's JSON (the rollback_handover step's result) that cannot be read back."""

    summary = "invalid rollback handover"
    default_action = "Pass the rollback_handover step's result (RollbackHandover.to_dict) unchanged."


class InvalidStartChoice(CheckpointError, ValueError):
    summary = "invalid choice of where the new version starts"
    default_action = (
        "Give handover_mode resume, rewind_to_batch (a batch id), at_time (an ISO 8601 time with "
        "its zone) or offsets (a startingOffsets JSON naming every partition). Nothing was changed."
    )


class InvalidSwitchoverRelease(CheckpointError, ValueError):
    """A switchover release (``_ckpt/switchover-release.json``) the standby cannot carry out."""

    summary = "invalid switchover release"
    default_action = (
        "Write the release with resume, offsets (every partition, offsets >= 0) or rewind_to_batch: "
        "the standby reads its start from the old checkpoint's files alone (at_time needs the broker; "
        "take that handover in the provider and release the standby with a StandbyRelease). Nothing was started."
    )


class BatchNotRewindable(CheckpointError):
    summary = "cannot rewind to that batch"
    default_action = (
        "Choose a committed batch in the retained range, or start at a time (at_time) or at "
        "explicit offsets. Nothing was changed."
    )


class ReprocessingNotAccepted(CheckpointError):
    """The chosen start processes records a second time, or skips some, without consent."""

    summary = "reprocessing not accepted"
    default_action = (
        "Read the ranges above; to go ahead, set accept_reprocessing=True (and accept_data_loss=True "
        "when records are skipped). Nothing was changed."
    )


class BrokerError(CheckpointError):
    summary = "Kafka broker error"
    default_action = "Check the Kafka client configuration and the broker logs."


class KafkaConnectionMissing(BrokerError):
    """The Airflow connection a Kafka step names does not exist."""

    summary = "Kafka connection missing"


class BrokerUnreachable(BrokerError):
    summary = "Kafka broker unreachable"
    default_action = "Check bootstrap servers, network and security settings, then retry."


# -- archive and restore (storage/archive.py) -------------------------------------------------------


class QueryStillRunning(CheckpointError):
    summary = "query still running"
    default_action = (
        "Stop the query first (graceful stop) and wait until its heartbeat is stale or its stop "
        "acknowledgement is written; nothing was copied or removed."
    )


class ArchiveError(CheckpointError):
    summary = "archive error"
    default_action = "Nothing was removed from the checkpoint; fix the cause and retry."


class ArchiveNotFound(ArchiveError):
    summary = "archive not found"
    default_action = "Check the archive location; `ckpt archives ROOT` lists the archives."


class ArchiveIncomplete(ArchiveError):
    summary = "archive incomplete"
    default_action = (
        "The copy never finished (no manifest). Re-run the archive with the same upgrade id to "
        "complete it, or delete it; never restore from it."
    )


class ArchiveCorrupt(ArchiveError):
    """A file of an archive (or a restored copy) that does not match the manifest; ``file`` names it."""

    summary = "archive corrupt"
    default_action = (
        "Do not restore from this archive or remove the original checkpoint; re-archive from the "
        "original if it still exists, else restore from an older archive."
    )

    def __init__(
        self, *, file: str, found: str, expected: str, action: str | None = None, path: str | None = None
    ) -> None:
        self.file = file
        super().__init__(found=found, expected=expected, action=action, path=path)

    def _where(self) -> str:
        return f" ({shorten(self.path)}: {shorten(self.file)})" if self.path else f" ({shorten(self.file)})"


class StateChecksumMismatch(ArchiveCorrupt):
    """A state file and Spark's own checksum of it (``<file>.crc``, Spark 4.1+
    ``spark.sql.streaming.checkpoint.fileChecksum.enabled``) disagree, or the checksum that the
    archive holds for a file is gone; ``file`` names the file. Spark would stop the restarted
    query with ``CHECKPOINT_FILE_CHECKSUM_VERIFICATION_FAILED``."""

    summary = "state file checksum mismatch"
    default_action = (
        "Do not restore or restart from this copy: Spark verifies these checksums when it reads the "
        "state. Re-archive from the original checkpoint if it still exists, else restore an older archive."
    )


class InvalidArchiveManifest(ArchiveCorrupt):
    """An archive's ``manifest.json`` that cannot be read back: not the JSON object this provider
    writes (format 1, sha256), or one whose entries contradict each other; ``file`` is the manifest."""

    summary = "archive manifest unreadable"
    default_action = (
        "Do not restore from this archive: without a manifest its files cannot be verified. Restore from "
        "another archive (`ckpt archives ROOT` lists them), or re-archive from the original checkpoint if it "
        "still exists."
    )

    def __init__(self, *, found: str, expected: str, file: str = "manifest.json", action: str | None = None,
                 path: str | None = None) -> None:
        super().__init__(file=file, found=found, expected=expected, action=action, path=path)


class CheckpointChanged(ArchiveError):
    summary = "checkpoint changed during the archive"
    default_action = (
        "Something still writes to the checkpoint; stop the query, then re-run the archive with "
        "the same upgrade id (it resumes and re-checks every file)."
    )


class HandoverMismatch(ArchiveError):
    summary = "handover does not match the checkpoint"
    default_action = (
        "The handover was taken from another checkpoint or before the query ran further; extract "
        "the handover again from the stopped query."
    )


class ArchiveConflict(ArchiveError):
    summary = "archive conflict"
    default_action = "Use another upgrade id, or archive the checkpoint the existing archive was made from."


class InvalidArchiveIntent(ArchiveError, ValueError):
    """An unfinished archive's ``_intent.json`` that is not the record the provider writes: what the
    archive was started for is unknown, so it is not resumed."""

    summary = "archive intent unreadable"
    default_action = ("Nothing was copied. Check what the unfinished archive folder holds; delete it (it has no "
                      "manifest, so no complete archive is lost) and run the archive again.")


class TargetNotEmpty(ArchiveError):
    summary = "target not empty"
    default_action = (
        "Restore only into an empty or missing location; move or delete what is there (a partial "
        "restore included) and retry."
    )


class UnsafeStreamName(ArchiveError, ValueError):
    summary = "unsafe name"
    default_action = "Use letters, digits, '.', '_' and '-' only (no '/', no '..', not empty)."


class ArchiveInsideCheckpoint(ArchiveError):
    summary = "archive inside the checkpoint"
    default_action = "Choose an archive root outside the checkpoint directory (and not containing it)."


# -- graceful stop (checkpoint/stop.py, hooks/escalation.py) -----------------------------------------


class InvalidStopResult(CheckpointError, ValueError):
    summary = "invalid stop result"
    default_action = "Pass the JSON returned by the graceful stop operator (or `ckpt stop --json`), unchanged."


class StopTimeout(CheckpointError):
    summary = "no stop acknowledgement"
    default_action = (
        "The query did not acknowledge the stop request in time and nothing says how to kill it; "
        "pass launch_handle (the launch operator's XCom) or --pid, or stop the driver by hand, "
        "then run the stop again."
    )


class CheckpointNotQuiet(CheckpointError):
    summary = "checkpoint not quiet after the stop"
    default_action = (
        "Something still plans batches on this checkpoint (a second query?); find and stop it "
        "before any handover, then run the stop again."
    )


class QueryStateUnknown(CheckpointError):
    """No heartbeat was ever written on the checkpoint and nothing commits: whether a query idles
    there without GracefulStop cannot be seen, so an upgrade cannot go on safely."""

    summary = "cannot tell whether the old query runs"
    default_action = (
        "Nothing was stopped. Give the old job's launch handle (the reference DAG's old_launch_handle "
        "param: what `ckpt launch` or StreamLaunchOperator returned) so the stop can see and kill it, or "
        "add GracefulStop to the job (docs: spark-side.md). A new version started now could run beside an "
        "idle old one and both would write what arrives next."
    )


class RunningWithoutGracefulStop(CheckpointNotQuiet):
    """Batches commit on the checkpoint while no heartbeat beats for them: the query runs without
    :class:`~airflow_ckpt_provider.spark.graceful_stop.GracefulStop` and cannot be asked to stop."""

    summary = "query running without GracefulStop"
    default_action = (
        "Nothing was stopped. Add GracefulStop to the job (docs: spark-side.md) so it can stop between "
        "batches, or stop it with its launch handle (`ckpt stop --pid PGID`, or GracefulStopOperator's "
        "launch_handle, which kills it after stop_timeout) or by killing its driver; then run the stop again."
    )


class QueryNotRunning(CheckpointError):
    summary = "no running query"
    default_action = (
        "Nothing to stop: check the checkpoint location, or allow this case (fail_if_not_running=False)."
    )


class EscalationFailed(CheckpointError):
    summary = "escalation failed"
    default_action = (
        "Kill the driver by hand (kill -KILL -<pgid>, spark-submit --kill, yarn application -kill), "
        "then run the stop again to check that the checkpoint is quiet."
    )


# -- launch and verification (checkpoint/verify.py, hooks/launcher.py, operators/launch.py) ---------


class StartMismatch(CheckpointError):
    """The new query did not start where the handover says; ``details`` holds one
    (topic, partition, expected, recorded, problem) per differing partition; offsets are None when
    absent and problem is one of gap, overlap, missing, unexpected."""

    summary = "new query did not start at the handover"
    default_action = (
        "Stop the new query now (a gap loses records, an overlap duplicates them), roll back to the "
        "old version on its own checkpoint, and start the new version again on an EMPTY checkpoint "
        "with the handed-over startingOffsets."
    )

    def __init__(
        self,
        *,
        details: tuple[tuple[str, int, int | None, int | None, str], ...],
        found: str,
        expected: str,
        action: str | None = None,
        path: str | None = None,
    ) -> None:
        self.details = details
        super().__init__(found=found, expected=expected, action=action, path=path)


class NotStartedYet(CheckpointError):
    summary = "new query has not recorded its start"
    default_action = "Wait until the new query has committed its first batch, then verify again."


class NoProgress(CheckpointError):
    summary = "new query makes no progress"
    default_action = (
        "Read the driver log; if records keep arriving in Kafka and no batch commits, stop the new "
        "query and roll back. Spark runs no batch while the topic is idle: upgrade while records "
        "arrive, or verify without a progress window (HandoverVerifyOperator(progress_window_s=0); "
        "in the reference DAG build_stream_upgrade_dag(progress_window_s=0))."
    )


class CheckpointNotEmpty(CheckpointError):
    summary = "new checkpoint location not empty"
    default_action = (
        "Queries never share a checkpoint: choose an empty or missing location for the new version "
        "(in the reference DAG, the new_checkpoint param). Restarting a version on its own checkpoint "
        "is StreamLaunchOperator(allow_existing_checkpoint=True), not an upgrade. Nothing was started."
    )


class SharedCheckpoint(CheckpointError):
    summary = "new checkpoint equals the old one"
    default_action = (
        "Give the new version its own checkpoint location; reusing the old one would ignore "
        "startingOffsets. Nothing was started."
    )


class FileSinkHazard(CheckpointError):
    summary = "file sink would skip batches"
    default_action = (
        "The output path has a _spark_metadata log from the old query; batches of a new checkpoint "
        "restart at 0 and would be skipped silently. Write to a new output path (or move the old "
        "output away). Nothing was started."
    )


class InvalidSinkSpec(CheckpointError):
    summary = "invalid sink declaration"
    default_action = (
        "Declare the sink as {\"kind\": one of delta, delta_foreach_batch, file, kafka, foreach_batch, "
        "\"location\": the table or output path, \"txn_app_id\": the txnAppId a constant-id Delta writer "
        "uses} (the reference DAG's sink param; docs \"Sinks\"). Nothing was changed."
    )


class DeltaWritesSkipped(CheckpointError):
    """Delta's idempotent writes would drop the new version's batches (delta-io/delta#1141)."""

    summary = "Delta would skip the new version's writes"
    default_action = (
        "A new checkpoint numbers its batches from 0 again, and Delta skips every write whose txnVersion is "
        "not above the version it recorded for that txnAppId. Write with "
        "airflow_ckpt_provider.spark.delta_txn_options(spark, checkpoint, batch_id) (txnAppId = the "
        "checkpoint's query id, new with every checkpoint), or give the new version a txnAppId the table has "
        "never seen and declare it as the sink's new_txn_app_id. Nothing was stopped or changed."
    )


class SinkLogUnreadable(CheckpointError):
    summary = "the sink's own record cannot be read"
    default_action = (
        "Check the sink location and its credentials (the storage connection); the provider reads the "
        "sink's log to decide what the sink holds. Nothing was changed."
    )


class SinkNotDelivered(CheckpointError):
    """Verify on the sink: the new query committed batches the sink does not hold."""

    summary = "the sink does not hold the new version's batches"
    default_action = (
        "The new query commits batches its sink threw away or never received: the upgrade fails and rolls "
        "back before the old checkpoint is archived. Read the sink's log (docs \"Sinks\"), fix the writer "
        "(for Delta idempotent writes: a txnAppId new with the checkpoint) and upgrade again with an empty "
        "new checkpoint."
    )


class LaunchFailed(CheckpointError):
    """The job could not be submitted or died before its first commit; ``log_tail`` holds the end of its log."""

    summary = "launch failed"
    default_action = "Read the driver log tail above, fix the job or its configuration and launch again."

    def __init__(
        self,
        *,
        found: str,
        expected: str,
        log_tail: str = "",
        action: str | None = None,
        path: str | None = None,
    ) -> None:
        self.log_tail = log_tail
        super().__init__(found=found, expected=expected, action=action, path=path,
                         detail=f"--- driver log tail ---\n{log_tail}" if log_tail else "")


class SwitchoverStandbyDied(LaunchFailed):
    """The new version's driver ended during a switchover: after the standby was released and
    before its query's first commit. The message says whether the standby had taken the handover,
    what its checkpoint holds and whether the old query stopped; ``action`` what the rollback does."""

    summary = "the new version died during the switchover"
    default_action = (
        "The rollback restarts the old version from its own checkpoint if it stopped (the standby only "
        "read it); nothing of the new checkpoint counts as a handover. Read the driver log tail, then "
        "upgrade again onto a new, empty checkpoint location."
    )


class StandbyNotHonoured(CheckpointError):
    """A standby launch whose job started its query instead of waiting for the handover."""

    summary = "the new version does not wait as a standby"
    default_action = (
        "The job was killed before the old version was touched. Build its Kafka reader with "
        "airflow_ckpt_provider.spark.kafka.read_kafka (or call spark.standby.await_handover before "
        "reading spark.ckpt.startingOffsets), or upgrade it with relaunch_mode='cold'. Empty the new "
        "checkpoint (and check the sink for rows it wrote) before the next try."
    )


class StandbyNotWaiting(CheckpointError):
    """A switchover asked of a standby that does not wait on the new checkpoint."""

    summary = "no standby waits for the switchover"
    default_action = (
        "Nothing was stopped and no release was written. Start the standby again (the start_standby "
        "step), or upgrade with relaunch_mode='cold'."
    )


class SwitchoverNotTaken(CheckpointError):
    """The standby released for a switchover did not start: it refused the release, with its reason."""

    summary = "the standby did not take over"
    default_action = (
        "The new version did not start and wrote no checkpoint file; the old query may have stopped "
        "(the refusal says how). Roll back (the reference DAG does: it restarts the old version where "
        "it stopped), then upgrade again; a stop that cut a batch needs the provider's handover "
        "(relaunch_mode='cold' or a standby release)."
    )


class SwitchoverUnsupported(CheckpointError):
    """The preflight refuses the switchover path for this stream (a switchover cannot honour it)."""

    summary = "the switchover path cannot take this upgrade"
    default_action = (
        "Nothing was changed. Upgrade this stream with the standby release (relaunch_mode='standby', the "
        "stream_upgrade DAG) or a cold launch (relaunch_mode='cold'): their handover step reconciles the "
        "offsets with the broker and their state export carries state."
    )


class SwitchoverMismatch(CheckpointError):
    """The standby started somewhere else than the handover the provider reads in the old checkpoint."""

    summary = "the standby's start differs from the provider's handover"
    default_action = (
        "The upgrade fails and rolls back. Compare the new checkpoint's _ckpt/switchover-handover.json "
        "with 'ckpt inspect' of the old checkpoint: a process that wrote to the old checkpoint after the "
        "stop, or storage that showed the two readers different files, is to be found before the next try."
    )


class FirstCommitTimeout(CheckpointError):
    summary = "no first commit in time"
    default_action = (
        "The job runs but did not commit a batch in time (slow start, no data, stuck source?); it "
        "was killed unless told otherwise. Read the driver log, then launch again with a longer "
        "first_commit_timeout."
    )


class StorageError(CheckpointError):
    """The checkpoint or archive storage answered something the provider cannot act on safely."""

    summary = "storage error"
    default_action = ("Nothing was changed. Check the storage location, its credentials (the storage connection "
                      "or storage options) and that the store is reachable, then retry.")


class JournalError(CheckpointError):
    """The upgrade journal prevents a safe step (see :mod:`airflow_ckpt_provider.storage.journal`)."""

    summary = "upgrade journal error"


class JournalCorrupt(JournalError):
    summary = "upgrade journal unreadable"
    default_action = ("Nothing was changed. Inspect the journal with `ckpt journal`; if it is damaged, move it "
                      "aside after checking both checkpoints by hand.")


class InvalidLockFile(CheckpointError, ValueError):
    """A lock file (a stream's ``LOCK.json``, a restore target's ``.<name>.restore-lock``) that is
    not the record the provider writes. Read as held: who holds it is unknown."""

    summary = "lock file unreadable"
    default_action = ("Nothing was changed; the lock counts as held. Check that no upgrade or restore is running, "
                      "then remove the lock file (`ckpt journal --release-lock` for a stream's lock).")


class JournalOfAnotherRelease(JournalCorrupt):
    """The journal is in another format than this release's: written by another release of the
    provider, for an upgrade that release must finish or abandon (never read in another meaning)."""

    summary = "upgrade journal written by another release"
    default_action = ("Nothing was changed. With the release that wrote it, finish that upgrade (re-trigger its "
                      "run) or abandon it (check both checkpoints, then `ckpt journal ARCHIVE_ROOT --name STREAM "
                      "--release-lock`); then start the upgrade again with this release (a new `upgrade_id`).")


class UpgradeInProgress(JournalError):
    summary = "another upgrade of this stream is in progress"
    default_action = ("Nothing was changed. Let that upgrade finish or resume it by re-triggering its run; if it "
                      "was abandoned, check both checkpoints, then `ckpt journal ARCHIVE_ROOT --name STREAM "
                      "--release-lock`.")


class UpgradeRolledBack(JournalError):
    summary = "upgrade already rolled back"
    default_action = ("Nothing was changed: a rolled-back upgrade does not go forward again (the old version runs "
                      "again). To try again, start a new upgrade to a new, empty checkpoint.")


class ForwardRollbackRefused(CheckpointError):
    """``rollback_mode="forward"`` cannot be honoured for this stream (checked in the preflight)."""

    summary = "rollback_mode 'forward' refused"
    default_action = ("Nothing was changed. A forward rollback restarts the old version on a fresh checkpoint, "
                      "which drops its state: use it for stateless queries only, and give it an empty "
                      "rollback_checkpoint; otherwise set the param rollback_mode to 'restore' (the default).")


# -- upgrade report (operators/report.py) -----------------------------------------------------------


class InvalidUpgradeReport(CheckpointError, ValueError):
    """An upgrade report's JSON (``report/upgrade-report.json``, the report step's XCom) that cannot be read back."""

    summary = "invalid upgrade report"
    default_action = "Pass the report as the report step wrote it (UpgradeReport.to_json), unchanged."


class UpgradeFailed(CheckpointError):
    summary = "upgrade did not complete"
    default_action = "Read the upgrade report and the failed step's log; the old version's state is in the report."


class UpgradeRefused(UpgradeFailed):
    """A decision before any side effect (the compatibility check, the path choice) refused the
    upgrade: it ended ``refused``, its journal closed and the stream's lock released."""

    summary = "upgrade refused before anything changed"
    default_action = ("Nothing was stopped, copied or started: the old version runs on as before. The upgrade's "
                      "journal is closed (outcome refused) and the stream's lock released. Fix what the refusing "
                      "step's log names (for the compatibility check: the new version's driver error and log tail) "
                      "and trigger the upgrade again.")


# -- state export (checkpoint/state.py, storage/state.py) ---------------------------------------------


class StateExportError(CheckpointError):
    """The old query's state cannot be exported (or an export cannot be used) safely; nothing was changed."""

    summary = "state export refused"


class StateBatchNotCommitted(StateExportError):
    summary = "state of an uncommitted batch"
    default_action = ("Only a committed batch's state is handed over: omit the batch (the last committed one is "
                      "used) or name one listed in commits/. Nothing was written.")


class StateVersionPurged(StateExportError):
    summary = "state version no longer retained"
    default_action = ("Spark keeps the state of the last spark.sql.streaming.minBatchesToRetain batches (100 by "
                      "default): export at a retained batch (the last committed one), or restore the checkpoint "
                      "from an archive that still holds it. Nothing was written.")


class StateFormatUnsupported(StateExportError):
    summary = "state format not readable here"
    default_action = ("Run the export with a Spark that reads this format, or upgrade without carrying the state "
                      "(the new version then starts with EMPTY state). Nothing was written.")


class StateMetadataMissing(StateExportError):
    summary = "stateful operator metadata missing"
    default_action = ("Spark 3.5+ writes state/<operator>/_metadata/metadata when a stateful query runs; restart the "
                      "old version once on Spark 3.5 or later (it writes it with its next batch), or restore it "
                      "from an archive. Nothing was written.")


class StateStartUnsupported(StateExportError):
    summary = "state cannot follow this start"
    default_action = ("The exported state belongs to a batch boundary: start the new version where the old one "
                      "stopped (handover_mode resume) or at a committed batch (rewind_to_batch), or carry no state "
                      "(the DAG's carry_state param false: the new version starts with EMPTY state). Nothing was "
                      "written.")


class StateExportCorrupt(StateExportError):
    summary = "state export does not verify"
    default_action = ("Run the export again (it replaces an unverified export); if it keeps failing, check the "
                      "storage under the export location. The new version was not started with this state.")


class InvalidStateExport(StateExportError, ValueError):
    """A state export step's result (``StateExport`` JSON) that cannot be read back."""

    summary = "invalid state export result"
    default_action = ("Pass the state export step's result (StateExportOperator's XCom) unchanged, or a bare export "
                      "location. Nothing was started.")


class SeededStateMismatch(StateExportError):
    """The state a standby seeded in a switchover differs from the provider's export of the same batch."""

    summary = "the state the new version started from differs from the old query's export"
    default_action = (
        "The upgrade fails and rolls back: the new version may hold wrong totals. Compare the seed under the new "
        "checkpoint's _ckpt/seed-state/ with the export (their state-manifest.json list rows and checksum per "
        "store); a process that wrote to the old checkpoint after its stop, or a reader of another Spark that "
        "reads the state differently, is to be found before the next try."
    )


class StateExportConflict(StateExportError):
    summary = "state export location holds something else"
    default_action = ("Each upgrade exports to its own location: remove what is there if it is yours, or choose "
                      "another upgrade id or export location. Nothing was written.")


class StateExportFailed(StateExportError):
    """The Spark job that reads the state ended with an error; ``log_tail`` holds the end of its log."""

    summary = "state export job failed"
    default_action = "Read the driver log tail below, fix the cause and run the export again (it starts over)."

    def __init__(self, *, found: str, expected: str, log_tail: str = "", action: str | None = None,
                 path: str | None = None) -> None:
        self.log_tail = log_tail
        super().__init__(found=found, expected=expected, action=action, path=path,
                         detail=f"--- driver log tail ---\n{log_tail}" if log_tail else "")


class InvalidLaunchHandle(CheckpointError, ValueError):
    """A LaunchHandle JSON that is malformed, lacks its mode's ids, or names pid 0 or 1."""

    summary = "invalid launch handle"
    default_action = "Pass the JSON returned by the launch operator, unchanged."


class InvalidSparkSettings(CheckpointError, ValueError):
    """A version's Spark settings (the DAG's ``old_spark`` / ``new_spark`` params) that cannot be used."""

    summary = "invalid Spark settings"
    default_action = "Fix the param in the trigger form or the DAG's defaults; nothing was started."


class InvalidVerifyResult(CheckpointError, ValueError):
    """A VerifyResult JSON that cannot be read back."""

    summary = "invalid verification result"
    default_action = "Pass the JSON returned by the verify operator (or `ckpt verify-handover --json`), unchanged."


class UnknownJobKind(CheckpointError, ValueError):
    """A handle's mode names a job kind no installed package registers."""

    summary = "unknown job kind"
    default_action = ("Install and import the package that registers this job kind "
                      "(register_job_kind or the 'airflow_ckpt_provider.job_kinds' entry point).")


# -- an old job the provider did not launch (checkpoint/old_job.py, jobs/adopt.py) -----------------


class InvalidOldJob(CheckpointError, ValueError):
    """An old-job declaration (the ``old_job`` param, the ``ckpt`` flags) with a field that cannot be
    used: ``found`` names the field."""

    summary = "invalid old job declaration"
    default_action = (
        "Declare the old job by what runs it (docs \"Bring your running stream\"): {\"kind\": process (pid, "
        "host), standalone (master, driver_id, master_ui_url), yarn (application_id, application_tags or "
        "application_name; resource_manager, user), kubernetes (namespace, pod or label_selector; context) or "
        "external (description)}, with no credential in it (they belong in a connection). Nothing was stopped "
        "or changed."
    )


class OldJobNotFound(CheckpointError):
    """No running application of the cluster manager matches the old-job declaration."""

    summary = "old job not found"
    default_action = (
        "Nothing was stopped. Check the declaration against the cluster manager's list of running "
        "applications (the candidates above, if any): give the application id, or the tags or name the job was "
        "submitted with, and the ResourceManager (or API server) that runs it."
    )


class OldJobAmbiguous(CheckpointError):
    """Several running applications match the old-job declaration: which one writes the checkpoint
    cannot be chosen safely."""

    summary = "several running applications match the old job"
    default_action = (
        "Nothing was stopped. Declare the old job by its application id (or pod name), one of the candidates "
        "listed, after checking which one writes the checkpoint (its Spark UI's streaming tab shows the "
        "query id)."
    )


class OldJobRestartsItself(CheckpointError):
    """The old job's driver is owned by something that starts it again when it is killed (a
    Kubernetes SparkApplication, Job, ReplicaSet or StatefulSet)."""

    summary = "the old job's owner restarts it"
    default_action = (
        "Nothing was stopped. Suspend or delete the owner named above first (kubectl delete sparkapplication "
        "<name>, or scale it to 0), or stop the job by hand and declare it as kind external; a killed driver "
        "would otherwise come back and write the checkpoint beside the new version."
    )


class KillNeedsSinkLedger(CheckpointError):
    """The old job can only be killed (or stopped by a person) and its sink is not declared: what a
    batch cut by the kill leaves in the sink cannot be told. ``accept_undeclared_sink`` does not lift
    this refusal."""

    summary = "a kill needs a declared sink"
    default_action = (
        "Nothing was stopped. Declare the job's sink (the `sink` param: delta, delta_foreach_batch, file, kafka "
        "or foreach_batch, with its location) so the handover reads what the sink holds of the batch the kill "
        "cuts; or add GracefulStop to the old job and restart it, so it stops between batches."
    )


class CutBatchNotAccepted(CheckpointError):
    """The old job is to be killed and its sink is at-least-once (``foreach_batch``, a Kafka sink
    without source headers): the batch the kill cuts may be processed twice, and nobody accepted it."""

    summary = "a cut batch may be processed twice"
    default_action = (
        "Nothing was stopped. Read the in-flight input range above (what one cut batch costs); if processing it "
        "twice is acceptable, trigger again with accept_cut_batch true (the report lists the range as processed "
        "twice). Or make the sink exact (Delta, a file sink, a Kafka sink with source headers) or add "
        "GracefulStop to the old job."
    )


class CheckpointOnDriverDisk(CheckpointError):
    """A checkpoint (or output) on a local path while the driver runs on a cluster node: the provider
    on its host reads another disk than the driver writes."""

    summary = "checkpoint on the driver's local disk"
    default_action = (
        "Nothing was stopped or changed. Put the checkpoint on storage every host reads (hdfs://, s3a://, "
        "abfss://, gs://), or, if the path is a mount shared by the driver's node and this host, declare "
        "shared_mount true in the old job."
    )


class ClusterManagerUnreachable(CheckpointError):
    """None of the cluster manager's endpoints (ResourceManagers, API server) answered."""

    summary = "cluster manager unreachable"
    default_action = (
        "Nothing was changed. Check the cluster manager's URL (resource_manager, the Kubernetes API server), "
        "that this host can reach it, and that one ResourceManager of an HA pair is active; then retry."
    )


class ClusterManagerRefused(CheckpointError):
    """The cluster manager answered a request with an error status (``status``)."""

    summary = "cluster manager refused the request"
    default_action = (
        "Nothing was changed by this request. Read the status and the answer above: 401/403 means the user "
        "(user.name, the bearer token) may not do it; 404 that the application or pod is not there."
    )

    def __init__(self, *, found: str, expected: str, status: int | None = None, action: str | None = None,
                 path: str | None = None) -> None:
        self.status = status
        super().__init__(found=found, expected=expected, action=action, path=path)


class CompatibilityError(CheckpointError):
    """A compatibility check (trial runs of the new version on copies) could not give a verdict."""

    summary = "compatibility check failed"


class TrialRefused(CompatibilityError):
    """The new version cannot be tried safely: it does not follow the trial contract, or the
    trial location overlaps a location the live job uses. Nothing was started or written."""

    summary = "trial refused"
    default_action = (
        "Make the job follow the trial contract (airflow_ckpt_provider.spark: sink_location() for every "
        "output and GracefulStop to run the query; see docs 'Spark side'), or choose a trial location "
        "outside the old and new checkpoints and sinks. Nothing was started."
    )


class NewVersionDoesNotStart(CompatibilityError):
    """A trial of the new version failed: the upgrade is refused before anything stops."""

    summary = "the new version does not start"
    default_action = (
        "The old version was not touched and keeps running. Fix the new version (the driver's error "
        "and log tail are above) and check again."
    )

    def __init__(self, *, found: str, expected: str, log_tail: str = "", action: str | None = None,
                 path: str | None = None) -> None:
        self.log_tail = log_tail
        super().__init__(found=found, expected=expected, action=action, path=path,
                         detail=f"--- driver log tail ---\n{log_tail}" if log_tail else "")


class InvalidVerdict(CompatibilityError, ValueError):
    summary = "invalid compatibility verdict"
    default_action = "Pass the JSON a compatibility check returned (CompatibilityVerdict.to_json)."


class InvalidTrialRecord(CompatibilityError, ValueError):
    """A file a driver writes for the compatibility check (``_ckpt/trial.json``,
    ``_ckpt/stateful-operators.json``) that is not its record."""

    summary = "trial driver file unreadable"
    default_action = ("Nothing of the live job was touched. The job's GracefulStop writes the file whole: when a newer "
                      "release of the provider runs in the job, upgrade the provider where the check runs; else "
                      "delete the file (the job writes its stateful operators again after its next start) and check "
                      "again.")


class InvalidUpgradePath(CompatibilityError, ValueError):
    summary = "invalid upgrade path"
    default_action = "Pass the result of the path step (UpgradePathOperator's XCom, PathChoice.to_json)."


# -- hostile and broken inputs ---------------------------------------------------------------------


class ImpossibleOffsets(CorruptCheckpointFile, InvalidHandover):
    """A committed batch whose Kafka offsets Spark never writes there: a sentinel (-1 latest, -2
    earliest) where Spark records the resolved position. Handing it over would make the new query
    start at "latest" (records skipped: silent loss) or "earliest" (records repeated). ``batch``
    is the committed batch, ``path`` its ``offsets/N`` file."""

    summary = "impossible offsets in a committed batch"
    default_action = (
        "Nothing was handed over or changed. Spark writes resolved offsets (>= 0) for every committed batch, so "
        "this offsets/N file was edited or damaged: restore it from a backup (the archive holds a copy), or rewind "
        "to an earlier batch or start the new version from explicit offsets you chose."
    )

    def __init__(self, *, found: str, expected: str, batch: int | None = None, path: str | None = None,
                 line: int | None = None, action: str | None = None) -> None:
        self.batch = batch
        super().__init__(found=found, expected=expected, path=path, line=line, action=action)


class JsonTooLarge(CorruptCheckpointFile, ValueError):
    """A JSON document beyond the size or depth limit (:mod:`airflow_ckpt_provider.json_limits`):
    nothing Spark or this provider writes comes near them, so the file was damaged or planted."""

    summary = "JSON input beyond the limits"
    default_action = (
        "Nothing was changed. The file is not one Spark or this provider wrote: restore it from a backup or "
        "remove it, and retry."
    )


class CredentialsInLocation(CheckpointError, ValueError):
    """A location (checkpoint, archive, journal, restore target) with credentials in its URL's
    user-info. The provider records and shows locations (manifests, journals, logs, XCom, reports),
    so it refuses them before reading or writing anything; ``path`` is the location, masked."""

    summary = "credentials in a location"
    default_action = (
        "Nothing was read or written. Remove the user-info from the URL and put the credentials in an Airflow "
        "connection (storage_conn_id / journal_conn_id) or the environment (AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, a Hadoop/Kerberos login), or pass them as storage options (-o key=...)."
    )


class UnsafeEntry(CheckpointError):
    """A symbolic link, FIFO, socket or device inside a tree the provider walks or a file it opens
    (checkpoint, archive, restore target, state): Spark writes only regular files and folders, and
    following a link could read or write outside the tree; opening a FIFO would block for ever."""

    summary = "link or special file in the tree"
    default_action = (
        "Nothing was copied or changed. Spark writes only regular files and folders: remove the entry (or replace "
        "the link by the file it points to, if that file belongs in the tree) and retry."
    )


def link_refused(path: str, target: str, resolved: str | None = None, outside: str | None = None) -> UnsafeEntry:
    """The refusal of the symbolic link ``path`` that points to ``target`` (as written in the
    link), resolving to ``resolved`` (when known), outside the tree ``outside`` (when it leaves it).
    One wording for every place that meets a link: the storage layer's walks and reads and both
    checkpoint readers (fsspec and Hadoop)."""
    where = f", outside {outside}" if outside else ""
    resolves = f" (resolves to {resolved}{where})" if resolved else (f" ({where[2:]})" if where else "")
    return UnsafeEntry(found=f"a symbolic link {path} -> {target}{resolves}",
                       expected="regular files and folders only (links are never followed)", path=path)


class LocationsOverlap(ArchiveError):
    """Two locations that must be separate are the same, or one lies inside the other, once ``..``
    and links are resolved (local disk) or by key prefix (object stores)."""

    summary = "locations overlap"
    default_action = "Nothing was written. Choose a location outside the other one and retry."


class RestoreInProgress(ArchiveError):
    """Another restore holds the target's lock (``.<target name>.restore-lock`` beside it)."""

    summary = "another restore into this target is in progress"
    default_action = (
        "Nothing was written. Wait for that restore to finish; if none runs (its process died on another host), "
        "remove the lock file and the temporary folder it names, then retry."
    )


class IncompleteRestore(CheckpointError):
    """A checkpoint location holding a restore that did not finish (its ``_restore_incomplete.json``
    marker is still there): some files may be missing, so it is never read as a checkpoint."""

    summary = "incomplete restore"
    default_action = (
        "Nothing was read. Delete the location and restore the archive again (`ckpt restore ARCHIVE --to LOCATION`)."
    )


class SinkAheadOfState(CheckpointError):
    """The sink holds a batch of a stateful query that its checkpoint did not commit."""

    summary = "the sink holds a batch whose state the checkpoint did not commit"
    default_action = (
        "Restart the old version on its checkpoint: Spark runs the cut batch again, the sink skips the "
        "write it already holds (Delta: same appId and batch id), and Spark commits the batch and its state. "
        "Then run the upgrade again. Nothing was changed."
    )


class SinkDeclarationMismatch(CheckpointError):
    """The declared sink's own record does not hold what the old query committed."""

    summary = "the sink does not record the old query's batches as declared"
    default_action = (
        "Declare the sink the way the job writes it: a job that writes Delta idempotent writes under a constant "
        "txnAppId declares it as txn_app_id (and gives the new version a new_txn_app_id); one that should write "
        "under the checkpoint's query id writes with delta_txn_options / delta_txn_conf; check the location. "
        "Nothing was stopped or changed."
    )


# -- the upgrade's step results (upgrade/results.py) ---------------------------------------------------


class InvalidTriggerEvent(CheckpointError, ValueError):
    """A trigger's event (the graceful stop's, the launch's) that is not one its trigger fires."""

    summary = "invalid trigger event"
    default_action = ("Nothing was changed. The event is the provider's own, passed from its trigger to its operator: "
                      "clear the task to wait again; an event of a newer release is not read (upgrade the provider "
                      "on the workers).")


class InvalidStepResult(CheckpointError, ValueError):
    summary = "invalid step result"
    default_action = ("Pass the step's result as its operator returned it (its XCom), unchanged; a result written "
                      "by another release of the provider is not read: finish that upgrade with the release that "
                      "started it.")


class RecordInputMissing(CheckpointError):
    """A step's input that it reads from the upgrade record (``FromRecord``,
    :mod:`airflow_ckpt_provider.upgrade.inputs`) is not there, and no empty value is safe."""

    summary = "a step's input is not in the upgrade record"
    default_action = ("Nothing was started or changed by this step. Run the step that records this input first "
                      "(re-trigger the DAG run: the upgrade resumes from its journal), or, for an operator used alone, "
                      "give it the upgrade journal (`journal=`) or the value itself instead of FromRecord(...).")


class SwitchoverRecordNotWritten(CheckpointError):
    """A standby released for a switchover could not write its answer (its refusal, or the handover
    it started from) in its checkpoint's ``_ckpt/`` after bounded retries: the driver ends with this
    error instead of leaving the provider waiting for an answer that never comes."""

    summary = "the standby could not record its switchover"
    default_action = ("The standby's driver exits without starting its query (it wrote no checkpoint file); the "
                      "switchover step fails as a new version that died, and the rollback restarts the old version if "
                      "it stopped. Check that the driver can write to the new checkpoint location (permissions, "
                      "space, the store's health), then upgrade again.")


class UndeclaredSink(CheckpointError):
    """The upgrade was asked without a sink declaration and without consent to an unproven one."""

    summary = "the job's sink is not declared"
    default_action = (
        "Declare the sink (the reference DAG's `sink` param, the preflight's `sink=`): {\"kind\": delta, "
        "delta_foreach_batch, file, kafka or foreach_batch, \"location\": the table, output path or topic} (docs "
        "\"Sinks\"); the provider then reads what the sink holds, or names the input a cut batch may repeat. Or, "
        "knowing that the sink may skip or duplicate a batch the stop cuts and that exactness is not proven, "
        "trigger again with accept_undeclared_sink true. Nothing was stopped or changed."
    )


class FileSinkLocationMismatch(CheckpointError):
    """A declared file sink's ``_spark_metadata`` does not hold the old query's batches."""

    summary = "the file sink's location does not hold the old query's output"
    default_action = (
        "Declare as the sink's location the output path the OLD version writes (the folder holding its "
        "_spark_metadata log, whose batch ids follow the old checkpoint's commits), and the new version's "
        "output path as new_sink_path. Nothing was stopped or changed."
    )


class OutputScanTimedOut(BrokerError):
    """A scan of a Kafka output topic did not reach the partitions' log ends within its deadline."""

    summary = "the scan of the output topic did not finish in time"
    default_action = (
        "Check that the brokers of the output topic answer (a broker lost mid-scan stops the reads), or give the "
        "scan a longer deadline (scan_timeout_s) for a large topic. The handover did not complete: nothing was "
        "launched."
    )


class UnknownStepKind(CheckpointError, ValueError):
    """A journaled step is declared (or asked about) as a kind the upgrade's step table does not
    name, or as a kind its operator class cannot be: the planner cannot decide for it."""

    summary = "a step of a kind the upgrade's step table does not name"
    default_action = ("Nothing was recorded or changed by this step. Declare the operator as one of the kinds its "
                      "class serves (the `step=` argument, e.g. step=\"rollback_stop_new\" for a GracefulStopOperator "
                      "that stops the new version in a rollback), or use it without the upgrade journal.")


class PathNotRecorded(CheckpointError):
    """The upgrade record names no path (neither the in-place restart nor a migration), so no step of a
    path or a rollback can be planned from it."""

    summary = "the upgrade record names no path"
    default_action = ("Nothing was recorded or changed by this step. The preflight records the path's relaunch mode "
                      "when it opens the journal: run the upgrade from its preflight (re-trigger the DAG run; it "
                      "resumes from the journal), or use the step without the upgrade journal.")


class HandoverMissing(CheckpointError):
    """A launch onto a new checkpoint was given no handover (no ``startingOffsets``): Spark would
    start where its own default says (latest) and skip every record in between."""

    summary = "a launch onto a new checkpoint without a handover"
    default_action = ("Nothing was started. Give the launch the handover (`handover=` a HandoverResult, or "
                      "`starting_offsets=` a startingOffsets JSON naming every partition), or, for a restart of "
                      "the same query on its own checkpoint, set allow_existing_checkpoint=True (Spark then resumes "
                      "from the checkpoint and needs none); a fresh stream with no old checkpoint passes "
                      "starting_offsets=\"earliest\" or \"latest\" explicitly.")

#: what an OS error means for a location, and what to do about it (:func:`os_error_parts`)
_OS_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOENT: ("nothing at this location", "Check the path (or URL) and retry."),
    errno.ENOSPC: ("no space left on the device", "Free space on that filesystem (or choose another) and retry."),
    errno.EDQUOT: ("the disk quota is used up", "Free space within the quota (or choose another location) and retry."),
    errno.EACCES: ("permission denied", "Run as a user who may read it (and write, for a target), or fix its "
                   "permissions, and retry."),
    errno.EPERM: ("operation not permitted", "Run as a user who may read it (and write, for a target), or fix its "
                  "permissions, and retry."),
    errno.EROFS: ("a read-only filesystem", "Choose a writable location and retry."),
    errno.ELOOP: ("a loop of symbolic links", "Replace the links by the folders or files they stand for and retry."),
    errno.ENOTDIR: ("a file where a folder is expected", "Give the folder (checkpoint, archive or target), not a file "
                    "inside it, and retry."),
    errno.EISDIR: ("a folder where a file is expected", "Give the file, not a folder, and retry."),
    errno.ENAMETOOLONG: ("a path that is too long", "Choose a shorter location and retry."),
    errno.EIO: ("an input/output error of the device", "Check the disk (kernel log) before trusting anything on it."),
}


def os_error_parts(exc: OSError) -> tuple[str, str]:
    """(found, action) for an OS error: what it means in words, with its path and errno name, and
    what to do; for typed errors such as :class:`StorageError` instead of a bare "cannot read"."""
    meaning, action = _OS_ERRORS.get(exc.errno or 0, (exc.strerror or str(exc), "Fix the cause and retry."))
    where = f" at {exc.filename}" if exc.filename else ""
    code = f" ({errno.errorcode.get(exc.errno, exc.errno)})" if exc.errno else ""
    return f"{meaning}{where}{code}", action
