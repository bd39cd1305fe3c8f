"""Agreement between two labellers of the same answers: Cohen's kappa, its interval, the confusion table.

Kappa is (observed agreement - chance agreement) / (1 - chance agreement), chance agreement from each
labeller's own label shares. Its 95% interval is a percentile bootstrap over the labelled answers
(:data:`BOOTSTRAP_SAMPLES` resamples, a fixed seed, so a report is the same on every run); a resample
in which both labellers gave one single label has no kappa and is left out (counted in
:attr:`Agreement.undefined_resamples`). ``tests/test_people_labels.py`` checks the interval's coverage
by a seeded simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from k9bench.stats import DEFAULT_RESAMPLES as BOOTSTRAP_SAMPLES
from k9bench.stats import DEFAULT_SEED as BOOTSTRAP_SEED


def _kappa_from_counts(counts: np.ndarray) -> np.ndarray:
    """Kappa of each confusion table in ``counts`` (shape ``(..., K, K)``); NaN where chance agreement is 1."""
    n = counts.sum(axis=(-2, -1))
    observed = np.trace(counts, axis1=-2, axis2=-1) / n
    expected = (counts.sum(axis=-1) * counts.sum(axis=-2)).sum(axis=-1) / (n * n)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(expected < 1.0, (observed - expected) / (1.0 - expected), np.nan)


def cohen_kappa(a: list, b: list) -> float | None:
    """Cohen's kappa of two equally long label lists; None when it is undefined (one label for everything)."""
    codes, categories = _codes(a, b)
    k = len(categories)
    counts = np.bincount(codes[0] * k + codes[1], minlength=k * k).reshape(k, k)
    value = float(_kappa_from_counts(counts.astype(float)))
    return None if np.isnan(value) else value


def _codes(a: list, b: list) -> tuple[np.ndarray, list]:
    if len(a) != len(b) or not a:
        raise ValueError("two non-empty label lists of the same length are needed")
    categories = sorted(set(a) | set(b))
    index = {c: i for i, c in enumerate(categories)}
    return np.array([[index[x] for x in a], [index[x] for x in b]]), categories


def kappa_interval(a: list, b: list, *, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED,
                   level: float = 0.95) -> tuple[tuple[float, float] | None, int]:
    """The percentile-bootstrap interval of kappa (None when too few resamples have one) and how many
    resamples had no kappa."""
    codes, categories = _codes(a, b)
    k, n = len(categories), codes.shape[1]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(samples, n))
    pair = codes[0][picks] * k + codes[1][picks]
    counts = np.zeros((samples, k * k))
    np.add.at(counts, (np.repeat(np.arange(samples), n), pair.ravel()), 1.0)
    values = _kappa_from_counts(counts.reshape(samples, k, k))
    defined = values[~np.isnan(values)]
    undefined = samples - defined.size
    if defined.size < samples // 2:
        return None, undefined
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(defined, [tail, 1.0 - tail])
    return (float(low), float(high)), undefined


@dataclass
class Agreement:
    """Two labellers on the answers both labelled."""

    first: str
    second: str
    count: int
    """Answers both labelled."""
    kappa: float | None
    interval: tuple | None
    observed: float
    """Share of answers given the same label."""
    confusion: dict = field(default_factory=dict)
    """first's label -> second's label -> count."""
    undefined_resamples: int = 0

    def to_dict(self) -> dict:
        return {"first": self.first, "second": self.second, "count": self.count, "kappa": self.kappa,
                "interval95": list(self.interval) if self.interval else None, "observed_agreement": self.observed,
                "confusion": self.confusion, "bootstrap": {"samples": BOOTSTRAP_SAMPLES, "seed": BOOTSTRAP_SEED,
                                                           "undefined_resamples": self.undefined_resamples}}


def agreement(first: str, labels_a: dict, second: str, labels_b: dict) -> Agreement | None:
    """The agreement of two ``idx -> label`` maps on their common idx (None when they share none)."""
    common = sorted(set(labels_a) & set(labels_b))
    if not common:
        return None
    a, b = [labels_a[i] for i in common], [labels_b[i] for i in common]
    confusion: dict = {}
    for x, y in zip(a, b):
        confusion.setdefault(x, {}).setdefault(y, 0)
        confusion[x][y] += 1
    interval, undefined = kappa_interval(a, b) if len(common) > 1 else (None, 0)
    return Agreement(first=first, second=second, count=len(common), kappa=cohen_kappa(a, b), interval=interval,
                     observed=sum(x == y for x, y in zip(a, b)) / len(common), confusion=confusion, undefined_resamples=undefined)
