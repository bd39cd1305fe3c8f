"""Accuracy statistics: bootstrap confidence intervals that resample videos.

K9-Bench asks about five questions per video, and questions about one video are
not independent (a model that cannot see a dark video misses all of them). The
confidence intervals here therefore resample *videos* with replacement: every
question of a drawn video comes along, as many times as the video was drawn.
Accuracy in a replicate is ``sum(correct) / sum(count)`` over the drawn videos,
overall and per category; the interval is the percentile interval of the
replicates. A fixed seed gives the same interval on every run and machine
(numpy's PCG64 generator).

Two models on the same questions (the report's ``--baseline``): a cluster-robust t interval of the
paired difference (:func:`paired_difference_interval`), the clustered McNemar test of Durkalski et al.
(:func:`clustered_mcnemar`) and the exact McNemar test (:func:`mcnemar_exact`, which assumes independent
questions).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Hashable, Sequence

log = logging.getLogger(__name__)

DEFAULT_RESAMPLES = 2000
"""Bootstrap replicates unless told otherwise."""
DEFAULT_SEED = 0
"""Seed of the bootstrap generator unless told otherwise."""
DEFAULT_LEVEL = 0.95
"""Confidence level of the intervals."""
MIN_INTERVAL_VIDEOS = 10
"""Fewest videos for an interval worth printing: one drawn from fewer (3 videos, say) says nothing and
often comes out as ``[0.0, 0.0]``, so reports and tables show ``n/a`` instead (see :func:`interval_shown`)."""
MAX_RESAMPLES = 100_000
"""Most replicates accepted (about 20 s for 907 videos; the intervals are stable long before)."""
_CHUNK = 4096
"""Replicates drawn at a time: memory stays at ``_CHUNK x videos`` whatever ``resamples`` is."""


@dataclass
class Interval:
    """A bootstrap interval for one accuracy."""

    low: float | None
    """Lower bound (None when no replicate was defined)."""
    high: float | None
    """Upper bound (None when no replicate was defined)."""
    defined: int
    """Replicates in which the accuracy was defined (the drawn videos held at least one question)."""

    def as_list(self) -> list[float] | None:
        """``[low, high]`` or None."""
        return None if self.low is None else [self.low, self.high]


@dataclass
class BootstrapResult:
    """Intervals for the overall accuracy and for each group label (category)."""

    overall: Interval
    """Interval of the accuracy over every counted question."""
    by_label: dict[str, Interval] = field(default_factory=dict)
    """Label (category) -> interval of that label's accuracy."""
    resamples: int = 0
    """Replicates drawn."""
    seed: int = DEFAULT_SEED
    """Generator seed."""
    level: float = DEFAULT_LEVEL
    """Confidence level."""
    units: int = 0
    """Videos (resampling units) in the data."""


def bootstrap_accuracy(
    correct: Sequence[bool],
    units: Sequence[Hashable],
    labels: Sequence[str] | None = None,
    counted: Sequence[bool] | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> BootstrapResult:
    """Percentile bootstrap intervals for accuracy, resampling ``units`` (videos).

    ``correct[i]`` is question i's verdict, ``units[i]`` its video, ``labels[i]`` its
    category, and ``counted[i]`` whether it enters the accuracy at all (False drops
    it, e.g. failed samples for VALID accuracy; its video still counts as a unit,
    so ALL and VALID intervals are drawn over the same videos). Every unit is
    drawn with equal probability; all labels share the same replicates.
    """
    import numpy as np

    n = len(correct)
    if len(units) != n or (labels is not None and len(labels) != n) or (counted is not None and len(counted) != n):
        raise ValueError("correct, units, labels and counted must have the same length")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if resamples > MAX_RESAMPLES:
        raise ValueError(f"resamples must be at most {MAX_RESAMPLES}, got {resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")

    unit_index: dict[Hashable, int] = {}
    unit_of = np.array([unit_index.setdefault(u, len(unit_index)) for u in units], dtype=np.int64)
    n_units = len(unit_index)
    label_names: list[str] = []
    if labels is not None:
        label_names = list(dict.fromkeys(labels))
    weight = np.ones(n) if counted is None else np.asarray(counted, dtype=float)
    hit = np.asarray(correct, dtype=float) * weight

    result = BootstrapResult(overall=Interval(None, None, 0), resamples=resamples, seed=seed, level=level, units=n_units)
    if n_units == 0:
        result.by_label = {name: Interval(None, None, 0) for name in label_names}
        return result

    masks = [np.ones(n)]
    if labels is not None:
        label_arr = np.asarray(labels, dtype=object)
        masks += [(label_arr == name).astype(float) for name in label_names]
    # per unit and mask: hits and counted questions (units x masks)
    hits = np.stack([np.bincount(unit_of, weights=hit * m, minlength=n_units) for m in masks], axis=1)
    totals = np.stack([np.bincount(unit_of, weights=weight * m, minlength=n_units) for m in masks], axis=1)
    rng = np.random.default_rng(seed)
    num = np.empty((resamples, len(masks)))
    den = np.empty((resamples, len(masks)))
    for lo in range(0, resamples, _CHUNK):
        size = min(_CHUNK, resamples - lo)
        # draws[b, v]: how many times video v is drawn in replicate b (n_units draws per replicate);
        # drawn in chunks from one generator: the same replicates as one big draw, in bounded memory
        draws = rng.multinomial(n_units, np.full(n_units, 1.0 / n_units), size=size).astype(float)
        num[lo:lo + size] = draws @ hits
        den[lo:lo + size] = draws @ totals

    def interval(col: int) -> Interval:
        ok = den[:, col] > 0
        if not ok.any():
            return Interval(None, None, 0)
        acc = num[ok, col] / den[ok, col]
        tail = (1.0 - level) / 2.0 * 100.0
        low, high = np.percentile(acc, [tail, 100.0 - tail])
        return Interval(float(low), float(high), int(ok.sum()))

    result.overall = interval(0)
    for i, name in enumerate(label_names if labels is not None else []):
        result.by_label[name] = interval(i + 1)
    return result


def interval_shown(units: int | None) -> bool:
    """Whether an interval drawn over ``units`` videos is shown (None: unknown, shown)."""
    return units is None or units >= MIN_INTERVAL_VIDEOS


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: the Cornish-Fisher expansion of the normal quantile in 1/df to the fourth term
    (Abramowitz and Stegun 26.7.5), within 1e-4 of the exact value from 9 degrees of freedom on (the fewest
    an interval is shown with: :data:`MIN_INTERVAL_VIDEOS` videos)."""
    from statistics import NormalDist

    if df < 1:
        raise ValueError(f"df must be at least 1, got {df}")
    z = NormalDist().inv_cdf(p)
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * df**4))


def _per_video(run_correct: Sequence[bool], baseline_correct: Sequence[bool], units: Sequence[Hashable]):
    """Per video: the sum of (run - baseline) over its questions, and its question count."""
    import numpy as np

    n = len(run_correct)
    if len(baseline_correct) != n or len(units) != n:
        raise ValueError("run_correct, baseline_correct and units must have the same length")
    unit_index: dict[Hashable, int] = {}
    unit_of = np.array([unit_index.setdefault(u, len(unit_index)) for u in units], dtype=np.int64)
    delta = np.asarray(run_correct, dtype=float) - np.asarray(baseline_correct, dtype=float)
    k = len(unit_index)
    return np.bincount(unit_of, weights=delta, minlength=k), np.bincount(unit_of, minlength=k).astype(float)


def paired_difference_interval(
    run_correct: Sequence[bool],
    baseline_correct: Sequence[bool],
    units: Sequence[Hashable],
    *,
    level: float = DEFAULT_LEVEL,
) -> Interval:
    """Interval of the paired accuracy difference (run minus baseline, a fraction), clustered by video.

    Question i was answered by both models: ``run_correct[i]`` and ``baseline_correct[i]`` are the two
    verdicts, ``units[i]`` its video. The difference is ``D = sum(d_k) / N`` (``d_k`` a video's sum of run
    minus baseline, ``N`` the questions); its standard error is the cluster-robust (linearised ratio) one
    with the small-sample factor ``K / (K - 1)`` over the ``K`` videos, and the interval is ``D +- t * SE``
    with Student's t on ``K - 1`` degrees of freedom: a video's questions move together, and with few
    videos the t quantile widens the interval where a normal or percentile-bootstrap one would be too
    narrow (tests/test_report_paired.py simulates its coverage). No randomness: the same verdicts give
    the same interval everywhere. Fewer than two videos: ``Interval(None, None, K)``."""
    import numpy as np

    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    d, n = _per_video(run_correct, baseline_correct, units)
    k = len(d)
    if k < 2:
        return Interval(None, None, k)
    diff = d.sum() / n.sum()
    se = math.sqrt(k / (k - 1) * float(np.sum((d - diff * n) ** 2))) / n.sum()
    half = t_quantile(0.5 + level / 2.0, k - 1) * se
    return Interval(float(diff - half), float(diff + half), k)


def clustered_mcnemar(run_correct: Sequence[bool], baseline_correct: Sequence[bool], units: Sequence[Hashable]) -> float:
    """Two-sided p-value of the clustered McNemar test of Durkalski, Palesch, Lipsitz and Rust (2003,
    *Statistics in Medicine* 22:2417-2428): ``X2 = (B - C)^2 / sum_k (b_k - c_k)^2`` against chi-square with
    one degree of freedom, ``b_k`` and ``c_k`` video k's discordant questions (run right and baseline wrong,
    the reverse), ``B`` and ``C`` their totals. The variance is taken over videos, so questions of one video
    may be correlated (the exact McNemar test assumes they are not). 1.0 when there is no discordant pair."""
    import numpy as np
    from statistics import NormalDist

    d, _ = _per_video(run_correct, baseline_correct, units)
    spread = float(np.sum(d ** 2))
    if spread == 0.0:
        return 1.0
    z = abs(float(d.sum())) / math.sqrt(spread)
    return min(1.0, 2.0 * (1.0 - NormalDist().cdf(z)))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: the discordant pairs ``b`` (run right, baseline wrong) and ``c``
    (run wrong, baseline right) against Binomial(b + c, 1/2); ``min(1, 2 * P(X <= min(b, c)))``, in exact
    integer arithmetic (1.0 when there is no discordant pair). It treats the pairs as independent, which questions of one video are not:
    :func:`clustered_mcnemar` is the test that allows for it."""
    import numbers

    for name, value in (("b", b), ("c", c)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be a count (a non-negative integer), got {value!r}")
    b, c = int(b), int(c)  # numpy counts too, in Python's exact integers
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)
