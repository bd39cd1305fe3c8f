"""CPU work ahead of the accelerator: batches are prepared by a bounded pool of workers while the model runs.

Preparing a batch (decoding its videos' frames, the processor's resize/normalise/patching, the
tokenizer) is CPU work that does not need the model. :class:`AheadPipeline` runs a ``prepare``
function for the next ``depth`` batches on ``workers`` threads (decoders, the processor's tensor
operations and the tokenizer release the GIL) and hands the results over in the original order;
the time the consumer (the model's thread) spends waiting for a batch that is not ready yet is the
accelerator's idle time, kept in :class:`PipelineStats` for ``run_stats``.

A ``prepare`` that raises does not stop the pipeline: the exception is handed over in the batch's
place (:class:`Prepared` ``error``), so the loop can write failed records for that batch and go on.
At most ``depth`` batches are prepared or held at once (their frames and pixel tensors are the
memory cost). ``close()`` cancels what has not started; a prepare already running finishes on its
thread and is dropped.

Usage::

    with AheadPipeline(prepare_batch, workers=4, depth=4) as ahead:
        for ready in ahead.run(planned_batches):
            if ready.error is not None: ...record failures...
            else: outputs = engine.run(ready.value)
    stats = ahead.stats.to_dict()

:class:`BatchesInFlight` is the other direction of the same idea, for a backend whose ``generate`` mostly
waits (an HTTP server): up to ``in_flight`` batches generating at once on their own threads.
:class:`FramePrefetcher` decodes the next videos' frames on one thread for the loop that goes video by video.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Iterator, TypeVar

if TYPE_CHECKING:
    from k9bench.video.sampling import Frames

log = logging.getLogger(__name__)

T = TypeVar("T")
U = TypeVar("U")

DEFAULT_WORKERS = 2
DEFAULT_DEPTH = 2


@dataclass
class PipelineStats:
    """How the preparation kept up (for ``run_stats``)."""

    workers: int = 0
    depth: int = 0
    prepared: int = 0
    """Items handed over."""
    failed: int = 0
    """Items whose ``prepare`` raised."""
    wait_seconds: float = 0.0
    """Time the consumer waited for a prepared item (the accelerator idle, waiting for the CPU)."""
    prepare_seconds: float = 0.0
    """Time spent inside ``prepare``, summed over workers (can exceed the wall time)."""
    max_wait_seconds: float = 0.0
    """Longest single wait."""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Prepared(Generic[T, U]):
    """One item and what ``prepare`` made of it."""

    item: T
    value: U | None = None
    error: BaseException | None = None
    seconds: float = 0.0
    """Time ``prepare`` took for this item."""


class AheadPipeline(Generic[T, U]):
    """Prepares items ahead of their use on a bounded thread pool (see the module doc)."""

    def __init__(self, prepare: Callable[[T], U], *, workers: int = DEFAULT_WORKERS, depth: int = DEFAULT_DEPTH,
                 name: str = "k9bench-prepare"):
        if workers < 1:
            raise ValueError(f"workers must be >= 1 (got {workers})")
        if depth < 1:
            raise ValueError(f"depth must be >= 1 (got {depth})")
        self._prepare = prepare
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._pending: deque[tuple[T, Future]] = deque()
        self.stats = PipelineStats(workers=workers, depth=depth)
        self.depth = depth

    def _timed(self, item: T) -> Prepared[T, U]:
        t0 = time.perf_counter()
        try:
            value = self._prepare(item)
        except Exception as exc:  # handed to the consumer in the item's place
            return Prepared(item, None, exc, time.perf_counter() - t0)
        return Prepared(item, value, None, time.perf_counter() - t0)

    def run(self, items: Iterable[T]) -> Iterator[Prepared[T, U]]:
        """Yield every item's :class:`Prepared`, in order, keeping up to ``depth`` in preparation."""
        source = iter(items)
        exhausted = False

        def fill() -> None:
            nonlocal exhausted
            while not exhausted and len(self._pending) < self.depth:
                try:
                    item = next(source)
                except StopIteration:
                    exhausted = True
                    return
                self._pending.append((item, self._pool.submit(self._timed, item)))

        fill()
        while self._pending:
            item, fut = self._pending.popleft()
            t0 = time.perf_counter()
            ready = fut.result()
            waited = time.perf_counter() - t0
            self.stats.wait_seconds += waited
            self.stats.max_wait_seconds = max(self.stats.max_wait_seconds, waited)
            self.stats.prepare_seconds += ready.seconds
            self.stats.prepared += 1
            if ready.error is not None:
                self.stats.failed += 1
            fill()  # start the next item before the consumer uses this one
            yield ready

    def close(self) -> None:
        """Cancel what has not started and let the workers go (running prepares finish on their threads)."""
        while self._pending:
            _, fut = self._pending.popleft()
            fut.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "AheadPipeline[T, U]":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class FramePrefetcher:
    """Decodes upcoming videos' frames in one background thread.

    Every call into the frame cache (``get`` and ``release``) runs on that one worker thread,
    in submission order, so the cache is never used concurrently.
    """

    def __init__(self, cache: Any):
        self.cache = cache
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k9bench-frames")
        self._futures: dict[str, Future] = {}
        self.wait_seconds = 0.0
        """Time the main thread spent waiting for frames."""

    def schedule(self, path: Path) -> None:
        key = str(path)
        if key not in self._futures:
            self._futures[key] = self._pool.submit(self.cache.get, path)

    def get(self, path: Path) -> "Frames":
        """The video's frames (raises ``VideoError``), waiting for the worker if needed."""
        self.schedule(path)
        t0 = time.perf_counter()
        try:
            return self._futures[str(path)].result()
        finally:
            self.wait_seconds += time.perf_counter() - t0

    def release(self, path: Path) -> None:
        self._futures.pop(str(path), None)
        self._pool.submit(self.cache.release, path)

    def close(self) -> None:
        for fut in self._futures.values():
            fut.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)


class BatchesInFlight:
    """Keeps up to ``in_flight`` batches generating at once, for backends whose ``generate`` mostly
    waits (an HTTP server: see ``max_batches_in_flight``).

    Batches are started in the loop's order (video by video, so the questions of a video are
    sent next to each other), each on its own daemon thread (an interrupted run does not wait
    for them); records are emitted as batches finish. A video's frames are released when its
    last batch is done. An error raised by a batch (not a failed question, which is a record)
    stops the run from the main thread.
    """

    def __init__(self, run_batch: Callable[..., None], prefetch: Any, in_flight: int):
        """``run_batch(group, questions, frames, audio)`` answers one batch and emits its records (the loop's
        :meth:`k9bench.inference.runner.Runner.run_batch`); ``prefetch`` releases a video's frames (or None)."""
        import queue

        self.run_batch = run_batch
        self.prefetch = prefetch
        self.slots = threading.BoundedSemaphore(in_flight)
        self.finished: "queue.Queue[tuple[Any, BaseException | None]]" = queue.Queue()
        self.remaining: dict[str, int] = {}

    def _work(self, group: Any, batch: list, frames: Any, audio: Any = None) -> None:
        error: BaseException | None = None
        try:
            self.run_batch(group, batch, frames, audio)
        except BaseException as exc:  # handed to the main thread
            error = exc
        finally:
            self.slots.release()
            self.finished.put((group, error))

    def _collect(self, block: bool) -> None:
        import queue

        while self.remaining:
            try:
                group, error = self.finished.get(timeout=0.1) if block else self.finished.get_nowait()
            except queue.Empty:
                if block:
                    continue
                return
            if error is not None:
                raise error
            key = str(group.path)
            self.remaining[key] -= 1
            if self.remaining[key] == 0:
                del self.remaining[key]
                if self.prefetch is not None:
                    self.prefetch.release(group.path)
            block = False  # one finished batch is enough; take the others that are ready

    def submit(self, group: Any, batches, frames: Any, audio: Any = None) -> None:
        """Start every batch of one video (waiting for free slots; signals stay deliverable)."""
        batches = list(batches)
        self.remaining[str(group.path)] = self.remaining.get(str(group.path), 0) + len(batches)
        for batch in batches:
            while not self.slots.acquire(timeout=0.1):
                self._collect(block=False)
            threading.Thread(target=self._work, args=(group, batch, frames, audio), name="k9bench-batch", daemon=True).start()
            self._collect(block=False)

    def finish(self) -> None:
        """Wait for every started batch."""
        while self.remaining:
            self._collect(block=True)


__all__ = ["AheadPipeline", "BatchesInFlight", "DEFAULT_DEPTH", "DEFAULT_WORKERS", "FramePrefetcher", "PipelineStats", "Prepared"]
