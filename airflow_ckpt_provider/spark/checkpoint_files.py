"""Read a checkpoint inside the user's Spark driver, through Hadoop's FileSystem: the driver's
adapter of the core's one checkpoint reader (:class:`HadoopCheckpointFiles`) and
:func:`read_handover`. Imports pyspark (its py4j gateway), the standard library and the pure core
(:mod:`airflow_ckpt_provider.checkpoint`, standard library only); never Airflow, fsspec or the
storage layer.

A new version's driver can take the old checkpoint's handover itself, with no Airflow task in
between::

    from airflow_ckpt_provider.spark.checkpoint_files import read_handover

    handover = read_handover(spark, "hdfs://nn:8020/checkpoints/orders")
    starting_offsets = handover.kafka_offsets().to_json()

It is the provider's own reader: :class:`~airflow_ckpt_provider.checkpoint.snapshot_reader.SnapshotReader`
decides which files to read, which batch is committed and what to refuse, here over Hadoop's
FileSystem as in Airflow over fsspec (``CheckpointReader(uri).handover()``), so both give the same
handover and refuse the same damage with the same typed error
(:mod:`airflow_ckpt_provider.checkpoint.errors`).

:class:`HadoopCheckpointFiles` opens a FileSystem instance of its own
(``FileSystem.newInstance``), never the cached one the running queries share, and closes it when
done. On a local disk it lists folders and opens files through ``java.nio`` itself, never
following a link (Hadoop's local listing follows a link and drops a dangling one, and its open
follows a link swapped in after the listing: a link must be reported, never followed out of the
tree), and Hadoop's own ``.crc`` checksum files are listed and read like any other file and
checked by the core (Hadoop's checksummed local filesystem would hide them and fail with its own
error). Elsewhere (HDFS, S3A, ABFS, GCS) Hadoop's listing says what is a link. It needs a classic
session (py4j): a Spark Connect client has no JVM to read through.

Not exported by :mod:`airflow_ckpt_provider.spark`: import it from this module.
"""

from __future__ import annotations

import errno
import logging
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.checkpoint.errors import UnreadableCheckpoint
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.checkpoint.snapshot_reader import (
    EntryKind,
    FileEntry,
    Link,
    LinkAtOpen,
    NotAFolder,
    SnapshotReader,
    display_path,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

__all__ = ["HadoopCheckpointFiles", "read_batch_start", "read_handover"]

#: Java exceptions -> the OSError the core maps to its typed errors (access: by the class name's end)
_NOT_FOUND = frozenset({"java.io.FileNotFoundException", "java.nio.file.NoSuchFileException"})
_DENIED = ("AccessDeniedException", "AccessControlException")
_NOT_DIR = frozenset({"java.nio.file.NotDirectoryException", "org.apache.hadoop.fs.ParentNotDirectoryException",
                      "org.apache.hadoop.fs.PathIsNotDirectoryException"})


def _os_error(java_exception: Any, shown: str) -> OSError:
    """The ``OSError`` for a Java exception met at ``shown``: not found, permission denied, a file
    on the way, or any other I/O error named by its Java class and message."""
    name = str(java_exception.getClass().getName())
    message = str(java_exception.getMessage() or "")
    if name in _NOT_FOUND:
        return FileNotFoundError(errno.ENOENT, "No such file or directory", shown)
    if name.endswith(_DENIED):
        return PermissionError(errno.EACCES, "Permission denied", shown)
    if name in _NOT_DIR:
        return NotADirectoryError(errno.ENOTDIR, "Not a directory", shown)
    return OSError(f"{name}: {message} ({shown})")


@contextmanager
def _java_io(shown: str) -> Iterator[None]:
    """Turn a Java exception raised through py4j inside the block into an ``OSError``."""
    from py4j.protocol import Py4JJavaError

    try:
        yield
    except Py4JJavaError as exc:
        raise _os_error(exc.java_exception, shown) from None


def _jvm_of(spark: SparkSession) -> tuple[Any, Any, Any]:
    """(JVM view, Hadoop configuration, py4j gateway) of a classic session; ``TypeError`` for one
    without a JVM (a Spark Connect client)."""
    try:
        jvm: Any = spark._jvm
        conf: Any = spark._jsc.hadoopConfiguration()
        gateway: Any = spark.sparkContext._gateway
    except Exception as exc:  # noqa: BLE001 - Spark Connect refuses JVM attributes in several ways
        raise TypeError(f"reading a checkpoint in the driver needs a classic SparkSession with a JVM (py4j), "
                        f"not {type(spark).__name__}: {exc}") from None
    if jvm is None or gateway is None:
        raise TypeError(f"reading a checkpoint in the driver needs a classic SparkSession with a JVM (py4j): "
                        f"this {type(spark).__name__} has none")
    return jvm, conf, gateway


class HadoopCheckpointFiles:
    """The checkpoint at ``checkpoint_uri`` (a path or any URL the session's Hadoop configuration
    can open: ``file:``, ``hdfs://``, ``s3a://`` ...) as the core reads it
    (:class:`~airflow_ckpt_provider.checkpoint.snapshot_reader.CheckpointFiles`), through a private
    Hadoop FileSystem of the driver's JVM. Use it in a ``with`` block, or :meth:`close` it.

    Raises :class:`~airflow_ckpt_provider.checkpoint.errors.CredentialsInLocation` for a location
    with credentials in it (before Hadoop sees it), ``TypeError`` for a session without a JVM
    (Spark Connect), and :class:`UnreadableCheckpoint` when Hadoop cannot open the location's
    filesystem. Listing and reading raise ``OSError``\\ s, which the core turns into its typed errors.
    """

    def __init__(self, spark: SparkSession, checkpoint_uri: str) -> None:
        refuse_credentials(checkpoint_uri, "checkpoint location")  # it is shown and handed over
        jvm, conf, gateway = _jvm_of(spark)
        self._uri = checkpoint_uri
        self._jvm: Any = jvm
        self._gateway: Any = gateway
        self._Path: Any = jvm.org.apache.hadoop.fs.Path
        self._real_root: str | None = None
        try:
            with _java_io(checkpoint_uri):
                given = self._Path(checkpoint_uri)
                self._fs: Any = jvm.org.apache.hadoop.fs.FileSystem.newInstance(given.toUri(), conf)
        except OSError as exc:
            raise UnreadableCheckpoint(found=str(exc), expected="a location Hadoop's FileSystem can open",
                                       path=checkpoint_uri) from None
        try:
            self._root: Any = self._fs.makeQualified(given)
            self._local = str(self._root.toUri().getScheme() or "").lower() == "file"
        except BaseException:
            self._fs.close()
            raise

    # -- CheckpointFiles ---------------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self._uri

    def display(self, path: str) -> str:
        return display_path(self._uri, path)

    def listdir(self, path: str, *, names_only: bool = False) -> list[FileEntry]:
        shown = self.display(path)
        with _java_io(shown):
            if self._local:
                return self._local_listdir(path, shown, names_only=names_only)
            target = self._hadoop_path(path)
            statuses = list(self._fs.listStatus(target))
            if (len(statuses) == 1 and statuses[0].isFile() and statuses[0].getPath().getName() == target.getName()
                    and self._fs.getFileStatus(target).isFile()):
                raise NotAFolder(shown)  # Hadoop lists a file as itself
            return [self._status_entry(status) for status in statuses]

    def stat(self, path: str) -> FileEntry:
        with _java_io(self.display(path)):
            if self._local:
                return self._local_entry(self._local_file(path))
            return self._status_entry(self._fs.getFileLinkStatus(self._hadoop_path(path)))

    def read_bytes(self, path: str) -> bytes:
        with _java_io(self.display(path)):
            stream = self._local_open(path) if self._local else self._fs.open(self._hadoop_path(path))
            try:
                return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()

    # -- the private FileSystem --------------------------------------------------------------------

    def close(self) -> None:
        """Close the private FileSystem instance (once; Spark's cached one is not touched)."""
        fs, self._fs = self._fs, None
        if fs is not None:
            fs.close()

    def __enter__(self) -> HadoopCheckpointFiles:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # -- helpers -----------------------------------------------------------------------------------

    def _hadoop_path(self, path: str) -> Any:
        return self._Path(self._root, path) if path else self._root

    def _status_entry(self, status: Any) -> FileEntry:
        """A Hadoop ``FileStatus`` as an entry (a symlink reported, not resolved)."""
        name = str(status.getPath().getName())
        if status.isSymlink():
            target = status.getSymlink()
            resolved = str(self._fs.makeQualified(target if target.isAbsolute()
                                                  else self._Path(status.getPath().getParent(), target)))
            root = str(self._root).rstrip("/")
            inside = resolved == root or resolved.startswith(root + "/")
            return FileEntry(name=name, kind=EntryKind.LINK,
                             link=Link(target=str(target), resolved=resolved, outside=not inside))
        kind = EntryKind.DIRECTORY if status.isDirectory() else EntryKind.FILE if status.isFile() else EntryKind.OTHER
        return FileEntry(name=name, kind=kind, size=int(status.getLen()))

    def _local_file(self, path: str) -> Any:
        """The ``java.io.File`` of ``path`` on the local disk."""
        root = str(self._root.toUri().getPath())
        return self._jvm.java.io.File(posixpath.join(root, path) if path else root)

    def _local_listdir(self, path: str, shown: str, *, names_only: bool) -> list[FileEntry]:
        folder = self._local_file(path)
        if not folder.isDirectory():  # follows a link, like fsspec's listing of the root
            if self._jvm.java.nio.file.Files.isRegularFile(folder.toPath(), self._link_options(follow=True)):
                raise NotAFolder(shown)
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", shown)
        names = folder.list()
        if names is None:  # java.io.File says no more; java.nio says whether it is a permission
            if not self._jvm.java.nio.file.Files.isReadable(folder.toPath()):
                raise PermissionError(errno.EACCES, "Permission denied", shown)
            raise OSError(errno.EIO, "the folder could not be listed", shown)
        joined = str(self._jvm.org.apache.hadoop.util.StringUtils.join("/", names))  # one call; "/" is in no name
        listed = [name for name in joined.split("/") if name]
        if names_only:  # batch logs: the core looks at a file before it reads it
            return [FileEntry(name=name, kind=EntryKind.UNKNOWN) for name in listed]
        return [self._local_entry(self._jvm.java.io.File(folder, name)) for name in listed]

    def _local_open(self, path: str) -> Any:
        """An ``InputStream`` of the local file ``path``, opened by ``java.nio`` with
        ``NOFOLLOW_LINKS`` (``O_NOFOLLOW`` on Linux): the open itself refuses a link, so one swapped
        in after the listing is never followed (a look before the open could be raced). A link
        there raises :class:`LinkAtOpen`, which the core refuses as a listed link."""
        from py4j.protocol import Py4JJavaError

        nio = self._jvm.java.nio
        file = self._local_file(path).toPath()
        options = self._gateway.new_array(nio.file.OpenOption, 2)
        options[0] = nio.file.StandardOpenOption.READ
        options[1] = nio.file.LinkOption.NOFOLLOW_LINKS
        try:
            channel = nio.file.Files.newByteChannel(file, options)
        except Py4JJavaError:
            if nio.file.Files.isSymbolicLink(file):
                raise LinkAtOpen(self._local_link(file)) from None
            raise
        return nio.channels.Channels.newInputStream(channel)

    def _local_entry(self, file: Any) -> FileEntry:
        """The entry of a local ``java.io.File``, looked at without following a link."""
        files = self._jvm.java.nio.file.Files
        path = file.toPath()
        attrs = files.readAttributes(path, self._jvm.java.nio.file.attribute.BasicFileAttributes._java_lang_class,
                                     self._link_options(follow=False))
        name = str(file.getName())
        if attrs.isSymbolicLink():
            return FileEntry(name=name, kind=EntryKind.LINK, link=self._local_link(path))
        kind = (EntryKind.FILE if attrs.isRegularFile() else EntryKind.DIRECTORY if attrs.isDirectory()
                else EntryKind.OTHER)
        return FileEntry(name=name, kind=kind, size=int(attrs.size()))

    def _local_link(self, path: Any) -> Link:
        """Where the local link ``path`` points, resolves, and whether that leaves the checkpoint."""
        target = self._jvm.java.nio.file.Files.readSymbolicLink(path)
        try:
            resolved = str(path.toRealPath(self._link_options(follow=True)))
        except Exception:  # noqa: BLE001 - a dangling link: resolve the words, not the disk
            resolved = str(path.getParent().resolve(target).normalize())
        root = self._local_real_root()
        return Link(target=str(target), resolved=resolved,
                    outside=not (resolved == root or resolved.startswith(root.rstrip("/") + "/")))

    def _local_real_root(self) -> str:
        if self._real_root is None:
            self._real_root = str(self._local_file("").toPath().toRealPath(self._link_options(follow=True)))
        return self._real_root

    def _link_options(self, *, follow: bool) -> Any:
        """A ``LinkOption[]`` for java.nio's varargs: empty (follow links) or ``NOFOLLOW_LINKS``."""
        options = self._gateway.new_array(self._jvm.java.nio.file.LinkOption, 0 if follow else 1)
        if not follow:
            options[0] = self._jvm.java.nio.file.LinkOption.NOFOLLOW_LINKS
        return options


def read_handover(spark: SparkSession, checkpoint_uri: str, *, taken_at: str | None = None) -> Handover:
    """The handover of the checkpoint at ``checkpoint_uri``, read in this driver through Hadoop's
    FileSystem: the end offsets of its last committed batch (an in-flight batch is named, never
    used), else its initial offsets. The same reader and rules as the provider's
    ``CheckpointReader(uri).handover()``, so the same handover and the same typed errors
    (:class:`~airflow_ckpt_provider.checkpoint.errors.NoOffsets`, ``CommitWithoutOffsets``,
    ``CorruptCheckpointFile``, ``MissingCheckpointMetadata``, ``UnsafeEntry``,
    ``CheckpointNotFound`` ...). ``taken_at``: the time to record (default now, UTC)."""
    return read_handover_and_operators(spark, checkpoint_uri, taken_at=taken_at)[0]


def read_handover_and_operators(spark: SparkSession, checkpoint_uri: str, *,
                                taken_at: str | None = None) -> tuple[Handover, tuple[int, ...]]:
    """:func:`read_handover`, and the stateful operators (``state/<id>`` folders) the same
    reading listed, for a seed that would otherwise list the checkpoint again."""
    with HadoopCheckpointFiles(spark, checkpoint_uri) as files:
        reader = SnapshotReader(files)
        snapshot = reader.snapshot()
        handover = reader.handover_of(snapshot, taken_at=taken_at)
    where = (f"the end of committed batch {handover.batch_id}" if handover.batch_id is not None
             else "its initial offsets (no batch committed)")
    in_flight = (f"; batch {handover.in_flight_batch} was in flight and is not handed over"
                 if handover.in_flight_batch is not None else "")
    log.info("read the handover of checkpoint %s in the driver: %s%s (%d files read, %d folders listed)",
             checkpoint_uri, where, in_flight, reader.files_opened, reader.listings)
    return handover, snapshot.state_operators


def read_batch_start(spark: SparkSession, checkpoint_uri: str, batch_id: int, *,
                     taken_at: str | None = None) -> Handover:
    """Where committed batch ``batch_id`` of the checkpoint at ``checkpoint_uri`` started, read in
    this driver through Hadoop's FileSystem (a rewind's start): the provider's
    ``CheckpointReader(uri).batch_start(batch_id)`` with the same rules and typed errors
    (:class:`~airflow_ckpt_provider.checkpoint.errors.BatchNotRewindable` when the batch is not
    committed or its start was purged)."""
    with HadoopCheckpointFiles(spark, checkpoint_uri) as files:
        start = SnapshotReader(files).batch_start(batch_id, taken_at=taken_at)
    log.info("read the start of batch %d of checkpoint %s in the driver: %s", batch_id, checkpoint_uri,
             "its initial offsets" if start.batch_id is None else f"the end of batch {start.batch_id}")
    return start
