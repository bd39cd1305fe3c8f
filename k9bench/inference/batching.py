"""Batches for the inference loop: batches of questions that may span videos, and what ``--batch_size`` became.

Pure functions, no torch: :func:`plan_batches` turns the questions (grouped by video, in order) into
batches of at most the batch size in use. A video's questions stay next to each other (its frames serve
them all); a batch holds whole videos as long as they fit and a video is split only at a batch boundary.
The size is read again at the start of every batch, so the batches planned after an out-of-memory halving
are planned at the new size. Every :class:`PlannedBatch` says which videos end with it (``release``): their
frames can be dropped once it is done.

:class:`BatchSizeChoice` records the size in use and why (a backend's ``--batch_size auto`` rule:
:func:`k9bench.inference.hf.batching.auto_batch_size` for transformers); :func:`halve_batch_size` is the step
after an out-of-memory error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

AUTO = "auto"
"""The ``--batch_size`` value that asks for the backend's rule."""


@dataclass(frozen=True)
class BatchPart:
    """A run of consecutive questions of one video inside a batch."""

    group: int
    """Index of the video in the list given to :func:`plan_batches`."""
    start: int
    """First question (index into that video's questions)."""
    stop: int
    """One past the last question."""

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class PlannedBatch:
    """One batch: parts of one or more videos, and the videos whose last question it holds."""

    parts: tuple[BatchPart, ...]
    release: tuple[int, ...]
    """Videos (group indices) that have no question left after this batch."""

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def groups(self) -> tuple[int, ...]:
        return tuple(p.group for p in self.parts)


def plan_batches(sizes: Sequence[int], batch_size: int | Callable[[], int]) -> Iterator[PlannedBatch]:
    """Pack the questions of each video (``sizes[g]`` questions for video ``g``), in order, into batches.

    Batches hold at most ``batch_size`` questions (a callable: asked at the start of each batch, the size in use
    then) and are filled up: a video that does not fit in what is left of a batch is split there and continues
    in the next batch. Videos with no questions are skipped. A generator: each batch is planned when it is taken.
    """
    size_now = batch_size if callable(batch_size) else (lambda: batch_size)
    for g, n in enumerate(sizes):
        if n < 0:
            raise ValueError(f"video {g}: negative question count {n}")
    parts: list[BatchPart] = []
    release: list[int] = []
    room = 0
    for g, n in enumerate(sizes):
        start = 0
        while start < n:
            if not parts:
                room = int(size_now())
                if room < 1:
                    raise ValueError(f"batch_size must be >= 1 (got {room})")
            take = min(room, n - start)
            parts.append(BatchPart(g, start, start + take))
            start += take
            room -= take
            if start == n:
                release.append(g)
            if room == 0:
                yield PlannedBatch(tuple(parts), tuple(release))
                parts, release = [], []
    if parts:
        yield PlannedBatch(tuple(parts), tuple(release))


@dataclass
class BatchSizeChoice:
    """The batch size in use and how it was reached (recorded in the artifact)."""

    requested: str
    """``auto`` or the number given."""
    batch_size: int
    """The size in use now."""
    reason: str
    """Why this size (the memory arithmetic, or ``given``)."""
    inputs: dict = field(default_factory=dict)
    """The figures the rule used (free bytes, bytes per row...)."""
    history: list = field(default_factory=list)
    """``[size, event]`` pairs: the first choice, then each halving after an out-of-memory error."""

    def halve(self, why: str = "out of memory") -> int:
        """Halve after an out-of-memory error (never below 1); returns the new size."""
        self.batch_size = halve_batch_size(self.batch_size)
        self.history.append([self.batch_size, why])
        return self.batch_size

    def to_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "batch_size": self.batch_size, "reason": self.reason,
                "inputs": dict(self.inputs), "history": [list(h) for h in self.history]}


def parse_batch_size(text: str | int) -> int | str:
    """A ``--batch_size`` value: a positive integer, or ``auto``. Raises ``ValueError`` with the reason."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        word = str(text).strip().lower()
        if word == AUTO:
            return AUTO
        try:
            value = int(word)
        except ValueError:
            raise ValueError(f"{text!r} is not a positive integer or 'auto'") from None
    if value < 1:
        raise ValueError(f"{text!r}: the batch size must be >= 1 (or 'auto')")
    return value


def halve_batch_size(size: int) -> int:
    """The batch size to retry with after an out-of-memory error."""
    return max(1, size // 2)


def given_batch_size(size: int) -> BatchSizeChoice:
    """A ``--batch_size N`` given on the command line (halved on out-of-memory like an automatic one)."""
    if size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {size})")
    return BatchSizeChoice(str(size), size, "given", {}, [[size, "given"]])


__all__ = ["AUTO", "BatchPart", "BatchSizeChoice", "PlannedBatch", "given_batch_size", "halve_batch_size", "parse_batch_size",
           "plan_batches"]
