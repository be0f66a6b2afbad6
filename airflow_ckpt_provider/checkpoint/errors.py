"""Typed errors of the checkpoint core.

Every error is a :class:`CheckpointError` built from keyword fields: what was ``found``, what was
``expected`` and the ``action`` to take (each class has a default action). ``str(error)`` reads
``"<summary>[ (<path>[, line N])]: found <found>; expected <expected>. <action>"`` so the command
line and the Airflow task log can show one self-explaining line.
"""

from __future__ import annotations

from typing import ClassVar


class CheckpointError(Exception):
    """Base class: something about a checkpoint, a handover or a broker prevents a safe answer."""

    summary: ClassVar[str] = "checkpoint error"
    default_action: ClassVar[str] = "Nothing was changed; fix the cause and retry."

    def __init__(
        self,
        *,
        found: str,
        expected: str,
        action: str | None = None,
        path: str | None = None,
    ) -> None:
        self.found = found
        self.expected = expected
        self.action = action if action is not None else self.default_action
        self.path = path
        super().__init__(str(self))

    def _where(self) -> str:
        return f" ({self.path})" if self.path else ""

    def __str__(self) -> str:
        return f"{self.summary}{self._where()}: found {self.found}; expected {self.expected}. {self.action}"

    def __reduce__(self):  # keep keyword-only construction picklable (Airflow, multiprocessing)
        return (_rebuild, (type(self), dict(self.__dict__)))


def _rebuild(cls: type[CheckpointError], state: dict) -> CheckpointError:
    error = cls.__new__(cls)
    error.__dict__.update(state)
    Exception.__init__(error, str(error))
    return error


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
        return f" ({self.path}, line {self.line})" if self.line else f" ({self.path})"


class UnsupportedLogVersion(CorruptCheckpointFile):
    summary = "unsupported log version"
    default_action = "Upgrade airflow-ckpt-provider to a release that knows this Spark log version."


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


class BrokerError(CheckpointError):
    summary = "Kafka broker error"
    default_action = "Check the Kafka client configuration and the broker logs."


class BrokerUnreachable(BrokerError):
    summary = "Kafka broker unreachable"
    default_action = "Check bootstrap servers, network and security settings, then retry."
