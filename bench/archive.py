"""Benchmark: verified checkpoint archive vs. ``cp -r`` of the same tree, measured in the same run.

Builds a checkpoint-like tree of 20,000 files, about 2 GB, in a temporary directory: offsets and
commits with their Hadoop ``.crc`` files, many small state deltas, and some large state
snapshots / RocksDB SST files. Times ``cp -r`` and ``CheckpointArchive.archive`` (SHA-256 while
copying, re-read and verify every file, manifest) alternately, ``--rounds`` times, and prints the
best throughput of each and their ratio (target: archive >= 0.8x of cp -r). Then times the
verification pass alone to show what the archive's extra time is spent on. Cleans up.

    python bench/archive.py [--files 20000] [--gib 2] [--rounds 2] [--workers 4] [--dir /tmp]

Exit status 1 if the ratio is below --target (default 0.8).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fsspec

from airflow_ckpt_provider.checkpoint.archive import CheckpointArchive
from airflow_ckpt_provider.checkpoint.logs import hadoop_crc
from airflow_ckpt_provider.checkpoint.restore import verify_archive

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


def timed(action) -> float:  # noqa: ANN001
    subprocess.run(["sync"], check=True)
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=None, help="archive threads (default: library default)")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--target", type=float, default=0.8)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    df = subprocess.run(["df", "-h", args.dir], capture_output=True, text=True, check=True).stdout
    print(df.rstrip())
    need = int(args.gib * 3.2 * 1024**3)
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
        fs = fsspec.filesystem("file")
        cp_times, archive_times = [], []
        for round_no in range(args.rounds):
            target = work / f"cp-{round_no}"
            cp_times.append(timed(lambda t=target: subprocess.run(["cp", "-r", str(src), str(t)], check=True)))
            shutil.rmtree(target)
            archiver = CheckpointArchive(fs, str(work / "archive"), workers=args.workers,
                                         progress_every_files=10**9, progress_every_s=10**9)
            archive_times.append(timed(lambda a=archiver, r=round_no: a.archive(
                fs, str(src), stream_name="bench", upgrade_id=f"round-{r}")))
            last = archiver.list("bench")[-1].path
            if round_no < args.rounds - 1:
                shutil.rmtree(work / "archive")
        verify_s = timed(lambda: verify_archive(fs, last, workers=args.workers))
        cp_s, archive_s = min(cp_times), min(archive_times)
        mib = size / MIB
        ratio = cp_s / archive_s
        print(f"{'':<28}{'seconds':>9}{'MiB/s':>9}")
        print(f"{'cp -r':<28}{cp_s:>9.2f}{mib / cp_s:>9.0f}")
        print(f"{'archive (hash+verify+manifest)':<28}{archive_s:>9.2f}{mib / archive_s:>9.0f}")
        print(f"{'  of which verify pass ~':<28}{verify_s:>9.2f}{mib / verify_s:>9.0f}")
        print(f"rounds: cp -r {', '.join(f'{t:.2f}' for t in cp_times)} s; "
              f"archive {', '.join(f'{t:.2f}' for t in archive_times)} s")
        verdict = "OK" if ratio >= args.target else "BELOW TARGET"
        print(f"ratio archive/cp -r throughput: {ratio:.2f}x (target {args.target:.2f}x) {verdict}")
        if ratio < args.target:
            copy_s = archive_s - verify_s
            print(f"dominated by: copy+hash {copy_s:.2f} s vs cp -r {cp_s:.2f} s, plus the verification "
                  f"re-read and hash {verify_s:.2f} s (SHA-256 of every byte twice on {os.cpu_count()} cpus)")
        return 0 if ratio >= args.target else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
