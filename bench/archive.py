"""Benchmark: verified, durable checkpoint archive vs. ``cp -r`` of the same tree, in the same run.

Builds a checkpoint-like tree of 20,000 files, about 2 GB, in a temporary directory: offsets and
commits with their Hadoop ``.crc`` files, many small state deltas, and some large state
snapshots / RocksDB SST files. Then, for each source state, ``--rounds`` times, alternating which
goes first, times on the same disk:

- ``cp -r`` of the tree, and the ``sync`` right after it: ``cp -r`` alone leaves the copy in the
  page cache, ``cp -r`` + ``sync`` is the durable equivalent of what the archive guarantees;
- ``CheckpointArchive.archive`` (SHA-256 of every byte, every byte read back from the archive
  and compared, flushed to disk, manifest written atomically and fsync'd).

Two source states (``--source``), because an archive meets both: **cached**, the source tree in
the page cache (a checkpoint just written); **disk**, the source evicted from the page cache before
each timed action (``POSIX_FADV_DONTNEED`` on every file after a sync; no privileges needed), as
for the older state files of a long-running query, or an archive being restored.

Every timed action starts after a ``sync`` (no dirty pages of the previous one), into a fresh
directory. An untimed ``cp -r`` goes first: on a VM whose host backs guest memory lazily, the first
gigabytes of page cache written after a pause come up several times faster than the rest, which
would favour whichever side runs first (its time is printed). Nothing is deleted until the end:
on ext4 without a journal, creating files within minutes of deleting many is several times slower
(the inode allocator looks up, and skips, inodes deleted in the last 60 s, or 360 s while their
inode table is not yet written back), which would penalise whichever side runs after a deletion.
For the same reason, do not start the benchmark within minutes of deleting many files (a previous
run's, or a test suite's).

The speed of such a machine drifts by several times within minutes, so the headline figures are
the MEDIAN of the per-round ratios: each round times both sides back to back, under the same
conditions. The best time of each side and their ratio are printed too, with every round's times,
the archive's phases (its best round) and, for reference, an independent re-hash of the archive
(``ckpt verify-archive``; not part of archiving). Also printed, from the same run: the CPU seconds
of each side, how long SHA-256 alone takes for these bytes on all of this machine's cores (hashing
memory, no I/O), and from those a lower bound for any archive that hashes every byte and writes
through the page cache like ``cp -r``: (SHA-256 CPU seconds + ``cp -r``'s CPU seconds) / cores.
When ``cp -r`` is fast, that bound alone shows how close to ``cp -r`` a checksummed copy can get
on this machine. Cleans up.

    python bench/archive.py [--files 20000] [--gib 2] [--rounds 4] [--source cached|disk|both]
                            [--workers N] [--dir /tmp]

``--s3`` instead compares on an S3-compatible server (moto on 127.0.0.1, ``local/s3.py``): a
smaller tree (``--s3-files``, ``--s3-mib``) is uploaded, then each round times, alternating which
goes first, the server's own copy of every object (CopyObject through s3fs, no bytes through the
client, no hashing) and ``CheckpointArchive.archive`` S3 -> S3 (every byte read, hashed, written,
read back and compared, manifest). The median per-round ratio is printed; no target (the
server's copy moves no bytes over the network, so the archive cannot reach it on a real store).

Exit status 1 if, for a source state, the median ratio to ``cp -r`` + ``sync``, the comparison
with the same guarantee, is below --target (default 0.8). The ratio to ``cp -r`` alone is printed
beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fsspec

from airflow_ckpt_provider.checkpoint.logs import hadoop_crc
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.restore import verify_archive
from airflow_ckpt_provider.storage.transfer import list_tree, run_parallel

MIB = 1024 * 1024


def build(root: Path, files: int, total_bytes: int, seed: int = 7) -> tuple[int, int]:
    """Write the tree; returns (file count, bytes). Size mix: ~40% tiny log files and .crc,
    ~50% small state deltas (2-64 KiB), ~10% large snapshots/SSTs carrying the rest of the bytes."""
    rng = random.Random(seed)
    pool = os.urandom(16 * MIB)
    written = count = 0

    def put(rel: str, size: int) -> None:
        nonlocal written, count
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        start = rng.randrange(0, len(pool) - min(size, len(pool)) + 1)
        with open(path, "wb") as handle:
            left = size
            while left > 0:
                block = pool[start:start + min(left, len(pool) - start)]
                handle.write(block)
                left -= len(block)
                start = 0
        written += size
        count += 1

    root.mkdir(parents=True)
    query = "abab5a79-a66c-41f4-85f8-55b2a371bf7e"
    (root / "metadata").write_text(json.dumps({"id": query}))
    count, written = 1, (root / "metadata").stat().st_size
    batches = files * 10 // 100  # offsets + commits + their .crc: 4 files per batch -> 40%
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1795290400000, "conf": {"spark.sql.shuffle.partitions": "8"}}
    for batch in range(batches):
        kafka = {"events": {str(p): 1000 * (batch + 1) + p for p in range(24)}}
        for rel, data in ((f"offsets/{batch}", f"v1\n{json.dumps(meta)}\n{json.dumps(kafka)}".encode()),
                          (f"commits/{batch}", b'v1\n{"nextBatchWatermarkMs":0}')):
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            (path.parent / f".{path.name}.crc").write_bytes(hadoop_crc(data))
            count += 2
            written += len(data) + (path.parent / f".{path.name}.crc").stat().st_size
    large = files // 10
    deltas = files - count - large
    for i in range(deltas):
        put(f"state/0/{i % 8}/{i // 8 + 1}.delta", rng.randint(2 * 1024, 64 * 1024))
    remaining = max(total_bytes - written, large)
    weights = [rng.uniform(0.2, 1.8) for _ in range(large)]
    scale = remaining / sum(weights)
    for i, weight in enumerate(weights):
        kind = f"state/1/{i % 8}/SSTs/{i:06d}-{i * 7919 % 100000:05d}.sst" if i % 2 else \
            f"state/0/{i % 8}/{100000 + i}.snapshot"
        put(kind, max(1, int(weight * scale)))
    return count, written


def sync() -> float:
    """``sync``; returns its seconds."""
    start = time.perf_counter()
    subprocess.run(["sync"], check=True)
    return time.perf_counter() - start


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_cp(src: Path, target: Path) -> tuple[float, float, float]:
    """(seconds of ``cp -r``, seconds of ``cp -r`` + ``sync``, CPU seconds of ``cp -r``), starting
    from a synced disk."""
    sync()
    cpu = children_cpu()
    start = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(target)], check=True)
    copied = time.perf_counter() - start
    cpu = children_cpu() - cpu
    return copied, copied + sync(), cpu


def time_archive(archiver: CheckpointArchive, src: Path, upgrade_id: str) -> float:
    fs = fsspec.filesystem("file")
    sync()
    start = time.perf_counter()
    archiver.archive(fs, str(src), stream_name="bench", upgrade_id=upgrade_id)
    return time.perf_counter() - start


def sha256_floor(nbytes: int, threads: int) -> tuple[float, float]:
    """(seconds, bytes/s) SHA-256 needs for ``nbytes`` on ``threads`` threads, hashing an in-memory
    buffer (no I/O at all): the least any archive that checksums every byte can take."""
    block = os.urandom(64 * MIB)
    rounds = max(1, int(nbytes / threads / len(block)))

    def work(_: int) -> None:
        for _ in range(rounds):
            hashlib.sha256(block).digest()

    start = time.perf_counter()
    run_parallel(range(threads), work, threads)
    rate = rounds * threads * len(block) / (time.perf_counter() - start)
    return nbytes / rate, rate


PHASES = {
    "scan": "scan (stop checks, read checkpoint, list)",
    "copy": "copy + SHA-256 + read-back compare",
    "check": "check (source quiet, archive untouched)",
    "verify": "verify (second pass)",
    "sync": "sync (syncfs, after the checks it overlaps)",
    "manifest": "manifest (atomic, fsync'd)",
}


def evict(root: Path) -> None:
    """Drop ``root``'s files from the page cache (``POSIX_FADV_DONTNEED`` on each, after a sync:
    clean pages go), so the next reader gets them from the disk. No root privileges needed."""
    files, _ = list_tree(fsspec.filesystem("file"), str(root))
    for rel in files:
        fd = os.open(root / rel, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


SOURCES = {
    "cached": "source in the page cache (just written, or read often)",
    "disk": "source on disk (evicted from the page cache before each timed action)",
}


class Rounds:
    """Per-round times and CPU seconds of both sides, for one source state."""

    def __init__(self) -> None:
        self.cp: list[float] = []
        self.durable_cp: list[float] = []
        self.archive: list[float] = []
        self.cp_cpu: list[float] = []
        self.archive_cpu: list[float] = []
        self.phases: list[dict[str, float]] = []

    def medians(self) -> tuple[float, float]:
        """(median of cp -r / archive, median of (cp -r + sync) / archive), per round."""
        return (statistics.median(c / a for c, a in zip(self.cp, self.archive, strict=False)),
                statistics.median(d / a for d, a in zip(self.durable_cp, self.archive, strict=False)))


def measure(src: Path, work: Path, source: str, rounds: int, workers: int | None) -> tuple[Rounds, str]:
    """``rounds`` rounds of both sides, alternating which goes first; (the rounds, the last archive)."""
    fs = fsspec.filesystem("file")
    result, last = Rounds(), ""

    def prepare() -> None:
        sync()
        if source == "disk":
            evict(src)

    for round_no in range(rounds):
        sides = ("cp", "archive") if round_no % 2 == 0 else ("archive", "cp")
        for side in sides:
            prepare()
            if side == "cp":
                copied, durable, cpu = time_cp(src, work / f"cp-{source}-{round_no}")
                result.cp.append(copied)
                result.durable_cp.append(durable)
                result.cp_cpu.append(cpu)
                continue
            archiver = CheckpointArchive(fs, str(work / f"archive-{source}-{round_no}"), workers=workers,
                                         progress_every_files=10**9, progress_every_s=10**9)
            cpu = time.process_time()
            result.archive.append(time_archive(archiver, src, f"round-{round_no}"))
            result.archive_cpu.append(time.process_time() - cpu)
            result.phases.append(dict(archiver.timings))
            last = archiver.list("bench")[-1].path
    return result, last


def report(source: str, rounds: Rounds, mib: float) -> None:
    cp_s, durable_s, archive_s = min(rounds.cp), min(rounds.durable_cp), min(rounds.archive)
    print(f"\n== {SOURCES[source]}")
    print(f"{'':<46}{'seconds':>9}{'MiB/s':>9}   (best round of each)")
    for label, seconds in (("cp -r (page cache only)", cp_s), ("cp -r + sync (durable)", durable_s),
                           ("archive (verified, durable)", archive_s)):
        print(f"{label:<46}{seconds:>9.2f}{mib / seconds:>9.0f}")
    for phase, seconds in rounds.phases[rounds.archive.index(archive_s)].items():
        print(f"{'  ' + PHASES.get(phase, phase):<46}{seconds:>9.2f}")
    print("rounds (cp -r | cp -r + sync | archive, seconds -> ratios; CPU seconds of cp -r and archive):")
    for number, (c, d, a) in enumerate(zip(rounds.cp, rounds.durable_cp, rounds.archive, strict=False)):
        print(f"  {number}: {c:5.2f} | {d:5.2f} | {a:5.2f} -> {c / a:.2f}x | {d / a:.2f}x"
              f"   (CPU {rounds.cp_cpu[number]:.2f} | {rounds.archive_cpu[number]:.2f})")
    print(f"best vs best: {cp_s / archive_s:.2f}x of cp -r, {durable_s / archive_s:.2f}x of cp -r + sync")


def s3_bench(files: int, mib: int, rounds: int, workers: int | None) -> int:
    """The S3 -> S3 comparison of ``--s3`` (see the module docstring); prints the ratio."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the S3 server: tests/harness/ of the checkout
    from tests.harness.s3 import LocalS3

    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-archive-s3-"))
    try:
        count, size = build(work / "checkpoint", files, mib * MIB)
        with LocalS3(work / "server") as server:
            fs = server.filesystem()
            bucket = server.create_bucket("bench")
            src = f"{bucket}/checkpoint"
            fs.put(str(work / "checkpoint"), src, recursive=True)
            print(f"uploaded {count:,} files, {size / MIB:,.0f} MiB to {server.endpoint_url} ({os.cpu_count()} cpus)")
            archiver = CheckpointArchive(fs, f"{bucket}/archive", workers=workers)
            copies: list[float] = []
            archives: list[float] = []
            for number in range(rounds):
                def copy(n: int = number) -> None:
                    start = time.perf_counter()
                    fs.copy(src, f"{bucket}/copy-{n}", recursive=True)
                    copies.append(time.perf_counter() - start)

                def archive(n: int = number) -> None:
                    start = time.perf_counter()
                    archiver.archive(fs, src, stream_name="bench", upgrade_id=f"s3-{n}")
                    archives.append(time.perf_counter() - start)

                for step in ((copy, archive) if number % 2 == 0 else (archive, copy)):
                    step()
                print(f"  round {number + 1}: server copy {copies[-1]:6.2f} s | archive {archives[-1]:6.2f} s "
                      f"-> {copies[-1] / archives[-1]:.2f}x")
            ratio = statistics.median(c / a for c, a in zip(copies, archives, strict=True))
            print(f"S3 -> S3: archive throughput, median of {rounds} per-round ratios: {ratio:.2f}x of the server's "
                  f"own copy (CopyObject, no hashing); best {min(archives):.2f} s vs {min(copies):.2f} s, "
                  f"{size / MIB / min(archives):.0f} MiB/s")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=4, help="rounds per source state")
    parser.add_argument("--source", choices=(*SOURCES, "both"), default="both",
                        help="where the source checkpoint is when each copy starts")
    parser.add_argument("--workers", type=int, default=None, help="archive threads (default: library default)")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--s3", action="store_true", help="compare S3 -> S3 on a local S3 server instead")
    parser.add_argument("--s3-files", type=int, default=2000)
    parser.add_argument("--s3-mib", type=int, default=128)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.s3:
        return s3_bench(args.s3_files, args.s3_mib, args.rounds, args.workers)
    sources = list(SOURCES) if args.source == "both" else [args.source]

    df = subprocess.run(["df", "-h", args.dir], capture_output=True, text=True, check=True).stdout
    print(df.rstrip())
    # the source, the warm-up, and each round's two copies
    need = int(args.gib * (2 + 2 * args.rounds * len(sources)) * 1.1 * 1024**3)
    free = shutil.disk_usage(args.dir).free
    if free < need:
        print(f"not enough free space in {args.dir}: {free / 1024**3:.1f} GiB, need {need / 1024**3:.1f} GiB")
        return 2

    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-archive-", dir=args.dir))
    try:
        src = work / "checkpoint"
        start = time.perf_counter()
        count, size = build(src, args.files, int(args.gib * 1024**3))
        print(f"built {count:,} files, {size / MIB:,.0f} MiB in {time.perf_counter() - start:.1f} s "
              f"({os.cpu_count()} cpus)")
        warm_up, _, _ = time_cp(src, work / "warm-up")
        measured: dict[str, Rounds] = {}
        last = ""
        for source in sources:
            measured[source], last = measure(src, work, source, args.rounds, args.workers)
        sync()
        start = time.perf_counter()
        verify_archive(fsspec.filesystem("file"), last, workers=args.workers)
        rehash_s = time.perf_counter() - start
        floor_s, sha_rate = sha256_floor(size, os.cpu_count() or 1)

        mib = size / MIB
        print(f"warm-up cp -r {warm_up:.2f} s (not counted)")
        for source, rounds in measured.items():
            report(source, rounds, mib)
        print()
        print(f"{'independent re-hash (verify-archive, not in archive)':<46}{rehash_s:>9.2f}{mib / rehash_s:>9.0f}")
        print(f"{f'SHA-256 alone, in memory, {os.cpu_count()} threads (floor)':<46}{floor_s:>9.2f}"
              f"{sha_rate / MIB:>9.0f}")
        cores = os.cpu_count() or 1
        cached = measured.get("cached")
        if cached is not None:
            cp_s = min(cached.cp)
            bound_s = (floor_s * cores + min(cached.cp_cpu)) / cores
            print(f"lower bound for an archive that hashes every byte and writes through the page cache as "
                  f"cp -r does: (SHA-256 {floor_s * cores:.2f} CPU s + cp -r {min(cached.cp_cpu):.2f} CPU s) / "
                  f"{cores} cores = {bound_s:.2f} s, so at most {cp_s / bound_s:.2f}x of cp -r's best "
                  f"{cp_s:.2f} s (source cached) on this machine")
        one, five, _ = os.getloadavg()
        print(f"load average at the end: {one:.2f} (1 min), {five:.2f} (5 min) on {cores} cpus "
              f"(other work on the machine slows both sides)")
        ok = True
        for source, rounds in measured.items():
            fast, durable = rounds.medians()
            met = durable >= args.target
            ok = ok and met
            print(f"{source}: archive throughput, median of {len(rounds.archive)} per-round ratios: "
                  f"{fast:.2f}x of cp -r (page cache only), {durable:.2f}x of cp -r + sync (durable, like the "
                  f"archive; target {args.target:.2f}x) {'OK' if met else 'BELOW TARGET'}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
