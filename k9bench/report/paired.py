"""``--baseline RUN``: this run against another model's run, question by question.

On the questions both runs answered with their video (the report's "Common questions" rule), the
report gives each run's accuracy, the difference (this run minus the baseline, in percentage points)
with a 95% interval from a **video-clustered paired bootstrap** (:func:`k9bench.stats.paired_bootstrap_difference`:
a drawn video brings its questions for both models at once), and an **exact McNemar test** on the
discordant pairs (:func:`k9bench.stats.mcnemar_exact`). From fewer than
:data:`k9bench.stats.MIN_INTERVAL_VIDEOS` common videos the interval and the p-value are n/a (None,
with the reason), as every other interval of the report is.

"This run" is the first ``--input_file``; the baseline is an eval file, or a run folder holding one
(``eval_*.json``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from k9bench.report.model import ReportError, RunSummary
from k9bench.stats import DEFAULT_LEVEL, DEFAULT_RESAMPLES, DEFAULT_SEED, MIN_INTERVAL_VIDEOS, interval_shown
from k9bench.data.subset import VIDEO_ABSENT

CI_METHOD = (f"paired bootstrap over videos (a video's questions resampled together for both runs), percentile, "
             f"{DEFAULT_RESAMPLES} resamples, seed {DEFAULT_SEED}")
"""How the difference's interval is drawn (``ci_method`` in report.json)."""


def resolve_baseline(path: str | Path) -> Path:
    """The baseline's eval file: ``path`` itself, or the one ``eval_*.json`` of a run folder
    (:class:`ReportError` naming the folder when it holds none or several)."""
    path = Path(path)
    if not path.is_dir():
        if not path.exists():
            raise ReportError(f"--baseline {path}: no such file or folder")
        return path
    found = sorted(p for p in path.glob("eval_*.json") if p.is_file())
    if not found:
        raise ReportError(f"--baseline {path}: the folder holds no eval file (eval_*.json); give the eval file itself")
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:5]) + (", ..." if len(found) > 5 else "")
        raise ReportError(f"--baseline {path}: the folder holds {len(found)} eval files ({names}); give one of them")
    return found[0]


@dataclass
class PairedComparison:
    """One run against the baseline on their common questions (accuracies and differences in percent)."""

    run_label: str
    run_path: str
    baseline_label: str
    baseline_path: str
    n_common_questions: int
    n_common_videos: int
    acc_run: float | None
    acc_baseline: float | None
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    mcnemar_b: int
    """Common questions the run got right and the baseline wrong."""
    mcnemar_c: int
    """Common questions the run got wrong and the baseline right."""
    mcnemar_p: float | None
    reason: str | None = None
    """Why the interval and p-value are None (too few common videos), else None."""
    ci_method: str = CI_METHOD
    level: float = DEFAULT_LEVEL

    def to_dict(self) -> dict:
        return {"baseline_label": self.baseline_label, "baseline_path": self.baseline_path, "run_label": self.run_label,
                "run_path": self.run_path, "n_common_questions": self.n_common_questions, "n_common_videos": self.n_common_videos,
                "acc_run": self.acc_run, "acc_baseline": self.acc_baseline, "diff": self.diff, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "ci_level": self.level, "ci_method": self.ci_method, "mcnemar_b": self.mcnemar_b,
                "mcnemar_c": self.mcnemar_c, "mcnemar_p": self.mcnemar_p, "reason": self.reason, "units": "percent"}


def paired_comparison(run: RunSummary, baseline: RunSummary, *, resamples: int = DEFAULT_RESAMPLES,
                      seed: int = DEFAULT_SEED) -> PairedComparison:
    """``run`` against ``baseline`` on the questions both answered with their video (a failed record
    counts as wrong, as everywhere in the report). :class:`ReportError` when a common idx is another
    question in the two files (another dataset)."""
    from k9bench.report.load import is_correct, video_of
    from k9bench.stats import mcnemar_exact, paired_bootstrap_difference

    mine = {r.idx: r for r in run.records if r.error_class not in VIDEO_ABSENT}
    theirs = {r.idx: r for r in baseline.records if r.error_class not in VIDEO_ABSENT}
    common = sorted(set(mine) & set(theirs))
    for idx in common:
        a, b = mine[idx], theirs[idx]
        if video_of(a) != video_of(b) or (a.question and b.question and a.question != b.question):
            raise ReportError(f"--baseline {baseline.path}: record idx {idx} is another question than in {run.path} "
                              f"(video {video_of(b)} vs {video_of(a)}); the two runs are not of the same dataset")
    ours = [is_correct(mine[i]) for i in common]
    base = [is_correct(theirs[i]) for i in common]
    units = [video_of(mine[i]) for i in common]
    n, videos = len(common), len(set(units))
    b = sum(1 for x, y in zip(ours, base) if x and not y)
    c = sum(1 for x, y in zip(ours, base) if y and not x)
    acc_run = 100.0 * sum(ours) / n if n else None
    acc_base = 100.0 * sum(base) / n if n else None
    out = PairedComparison(run_label=run.label, run_path=run.path, baseline_label=baseline.label, baseline_path=baseline.path,
                           n_common_questions=n, n_common_videos=videos, acc_run=acc_run, acc_baseline=acc_base,
                           diff=None if n == 0 else acc_run - acc_base, ci_low=None, ci_high=None, mcnemar_b=b, mcnemar_c=c,
                           mcnemar_p=None)
    if n == 0:
        out.reason = "no common question (the runs share no question answered with its video)"
    elif not interval_shown(videos):
        out.reason = (f"{videos} common video{'' if videos == 1 else 's'}, fewer than {MIN_INTERVAL_VIDEOS}: "
                      "too few for an interval or a test")
    else:
        interval = paired_bootstrap_difference(ours, base, units, resamples=resamples, seed=seed)
        out.ci_low, out.ci_high = 100.0 * interval.low, 100.0 * interval.high
        out.mcnemar_p = mcnemar_exact(b, c)
    if resamples != DEFAULT_RESAMPLES or seed != DEFAULT_SEED:
        out.ci_method = CI_METHOD.replace(f"{DEFAULT_RESAMPLES} resamples, seed {DEFAULT_SEED}", f"{resamples} resamples, seed {seed}")
    return out


def _pct(value: float | None, signed: bool = False) -> str:
    return "—" if value is None else (f"{value:+.1f}" if signed else f"{value:.1f}")


def paired_markdown(pc: PairedComparison | None) -> list[str]:
    """report.md's "Paired comparison" section (nothing without ``--baseline``)."""
    if pc is None:
        return []
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    out = ["## Paired comparison (--baseline)", "",
           f"**{cell(pc.run_label)}** against the baseline **{cell(pc.baseline_label)}** (`{pc.baseline_path}`) on the "
           f"{pc.n_common_questions:,} question{'' if pc.n_common_questions == 1 else 's'} ({pc.n_common_videos:,} "
           f"video{'' if pc.n_common_videos == 1 else 's'}) both answered with their video. Accuracy in %, the difference "
           "in percentage points (this run minus the baseline).", ""]
    ci = "n/a" if pc.ci_low is None else f"[{pc.ci_low:+.1f}, {pc.ci_high:+.1f}]"
    p = "n/a" if pc.mcnemar_p is None else f"{pc.mcnemar_p:.4g}"
    out += ["| This run | Baseline | Difference | 95% interval | Run right, baseline wrong (b) | Run wrong, baseline right (c) | "
            "McNemar exact p |", "|---:|---:|---:|---|---:|---:|---:|",
            f"| {_pct(pc.acc_run)} | {_pct(pc.acc_baseline)} | {_pct(pc.diff, True)} | {ci} | {pc.mcnemar_b} | {pc.mcnemar_c} | {p} |",
            ""]
    if pc.reason:
        out += [f"Interval and test n/a: {pc.reason}.", ""]
    out += [f"The interval is a {pc.ci_method}: the five or so questions of a video are correlated, so they move together. "
            "The McNemar test (two-sided, exact binomial on b and c) treats the questions as independent pairs, so its p-value "
            "is optimistic when a video's questions go together; the interval takes the videos into account.", ""]
    return out


def paired_line(pc: PairedComparison) -> str:
    """One line for the terminal: the difference, its interval and the McNemar p (or why they are n/a)."""
    head = f"paired comparison: {pc.run_label} minus {pc.baseline_label}: {_pct(pc.diff, True)} points on " \
           f"{pc.n_common_questions:,} common questions ({pc.n_common_videos:,} videos)"
    if pc.reason:
        return f"{head}; interval and McNemar test n/a ({pc.reason})"
    return f"{head}, 95% interval [{pc.ci_low:+.1f}, {pc.ci_high:+.1f}] (paired bootstrap over videos), " \
           f"McNemar exact p = {pc.mcnemar_p:.4g} (b={pc.mcnemar_b}, c={pc.mcnemar_c})"
