"""One check of a deferred wait, bounded: the triggers' polls read storage (and, for the launch,
Kafka and the cluster manager) in a thread, and a request that never answers must not hold a
trigger past its deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: How long past its wait's deadline one check may take before it counts as failed (seconds).
CHECK_GRACE_S = 60.0


async def bounded_check(call: Callable[..., T], *args: Any, deadline: float,  # noqa: ANN401
                        grace_s: float | None = None) -> T:
    """``call(*args)`` in a thread, for at most the time left until ``deadline`` (epoch seconds)
    plus ``grace_s`` (default :data:`CHECK_GRACE_S`). A check still running then raises
    ``TimeoutError`` (an ``OSError``: the triggers treat it as a failed read, retry it, and fire
    their timeout once the deadline passed); the thread is left to finish on its own."""
    limit = max(0.0, deadline - time.time()) + (CHECK_GRACE_S if grace_s is None else grace_s)
    task = asyncio.ensure_future(asyncio.to_thread(call, *args))
    done, _ = await asyncio.wait({task}, timeout=limit)
    if not done:
        task.cancel()
        raise TimeoutError(f"a check of the wait did not answer within {limit:.1f} s (storage or cluster "
                           "not answering)")
    return task.result()


__all__ = ["CHECK_GRACE_S", "bounded_check"]
