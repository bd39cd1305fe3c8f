"""``--baseline RUN``: this run against another model's run, question by question.

On the questions both runs answered with their video (the report's "Common questions" rule) and whose
ground truth and options are the same in both files, the report gives each run's accuracy, the
difference (this run minus the baseline, in percentage points) with a 95% **cluster-robust t interval**
(:func:`k9bench.stats.paired_difference_interval`: a video's questions move together), the **clustered
McNemar test** of Durkalski et al. (2003) as the test it leads with (:func:`k9bench.stats.clustered_mcnemar`),
and the exact McNemar test (:func:`k9bench.stats.mcnemar_exact`), whose p-value assumes independent
questions and says so beside it. From fewer than :data:`k9bench.stats.MIN_INTERVAL_VIDEOS` common
videos the interval and the p-values are n/a (None, with the reason), as every other interval of the
report is.

Two runs scored another way (another threshold or embedding model) are not compared: their verdicts
mean different things. The block then says why and holds no figure (``comparable`` false).

"This run" is the first ``--input_file``; the baseline is an eval file, or a run folder holding one
(``eval_*.json``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from k9bench.report.model import ReportError, RunSummary
from k9bench.stats import DEFAULT_LEVEL, MIN_INTERVAL_VIDEOS, interval_shown
from k9bench.data.subset import VIDEO_ABSENT

CI_METHOD = ("cluster-robust t interval over videos (linearised ratio standard error with the K/(K-1) factor, "
             "Student's t on K-1 degrees of freedom, K the common videos)")
"""How the difference's interval is drawn (``ci_method`` in report.json)."""
TEST_METHOD = "clustered McNemar test (Durkalski et al. 2003): X2 = (B-C)^2 / sum over videos of (b_k-c_k)^2, chi-square 1 df"
"""The test the report leads with (``test_method`` in report.json)."""
MCNEMAR_ASSUMPTION = "assumes independent questions; a video's questions are not"
"""What the exact McNemar p-value takes for granted, shown beside it."""


def option_texts(options) -> list[str]:
    """The five options' texts (a record's ``"A. text"`` list, or a letter -> text dict), without their letters."""
    if isinstance(options, dict):
        return [str(options.get(k, "")) for k in "ABCDE"]
    return [re.sub(r"^[A-E][.):]\s*", "", str(o)) for o in (options or [])][:5]


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
    mcnemar_b: int | None
    """Common questions the run got right and the baseline wrong (None when not compared)."""
    mcnemar_c: int | None
    """Common questions the run got wrong and the baseline right (None when not compared)."""
    mcnemar_p: float | None
    """Exact McNemar p-value (assumes independent questions)."""
    clustered_p: float | None = None
    """The clustered McNemar p-value (Durkalski et al.), the test the report leads with."""
    reason: str | None = None
    """Why the interval and p-values are None (too few common videos; runs not comparable), else None."""
    comparable: bool = True
    """False when the runs were scored another way: nothing is compared."""
    n_mismatched: int = 0
    """Common questions left out because their ground truth or options differ between the two files."""
    mismatched_idx: tuple = ()
    """The first of those (at most 10)."""
    scoring: dict | None = None
    """``{"run": {...}, "baseline": {...}}``: each run's threshold and embedding model."""
    ci_method: str = CI_METHOD
    level: float = DEFAULT_LEVEL

    def to_dict(self) -> dict:
        return {"baseline_label": self.baseline_label, "baseline_path": self.baseline_path, "run_label": self.run_label,
                "run_path": self.run_path, "comparable": self.comparable, "scoring": self.scoring,
                "n_common_questions": self.n_common_questions, "n_common_videos": self.n_common_videos,
                "n_mismatched": self.n_mismatched, "mismatched_idx": list(self.mismatched_idx),
                "acc_run": self.acc_run, "acc_baseline": self.acc_baseline, "diff": self.diff, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "ci_level": self.level, "ci_method": self.ci_method, "test_method": TEST_METHOD,
                "clustered_p": self.clustered_p, "mcnemar_b": self.mcnemar_b, "mcnemar_c": self.mcnemar_c,
                "mcnemar_p": self.mcnemar_p, "mcnemar_assumption": MCNEMAR_ASSUMPTION, "reason": self.reason, "units": "percent"}


def _scoring(run: RunSummary) -> dict:
    return {"threshold": run.settings.threshold, "embedding_model": run.settings.embedding_model}


def paired_comparison(run: RunSummary, baseline: RunSummary) -> PairedComparison:
    """``run`` against ``baseline`` on the questions both answered with their video (a failed record
    counts as wrong, as everywhere in the report) whose ground truth and options agree. :class:`ReportError`
    when a common idx is another question in the two files (another dataset); runs scored another way
    (threshold, embedding model) give a block that compares nothing and says why."""
    from k9bench.report.load import is_correct
    from k9bench.stats import clustered_mcnemar, mcnemar_exact, paired_difference_interval

    mine = {r.idx: r for r in run.records if r.error_class not in VIDEO_ABSENT}
    theirs = {r.idx: r for r in baseline.records if r.error_class not in VIDEO_ABSENT}
    common, mismatched = [], []
    for idx in sorted(set(mine) & set(theirs)):
        a, b = mine[idx], theirs[idx]
        if a.video_key != b.video_key or (a.question and b.question and a.question != b.question):
            raise ReportError(f"--baseline {baseline.path}: record idx {idx} is another question than in {run.path} "
                              f"(video {b.video_key} vs {a.video_key}); the two runs are not of the same dataset")
        same = a.ground_truth == b.ground_truth and option_texts(a.options) == option_texts(b.options)
        (common if same else mismatched).append(idx)
    scoring = {"run": _scoring(run), "baseline": _scoring(baseline)}
    out = PairedComparison(run_label=run.label, run_path=run.path, baseline_label=baseline.label, baseline_path=baseline.path,
                           n_common_questions=len(common), n_common_videos=len({mine[i].video_key for i in common}),
                           acc_run=None, acc_baseline=None, diff=None, ci_low=None, ci_high=None, mcnemar_b=None, mcnemar_c=None,
                           mcnemar_p=None, n_mismatched=len(mismatched), mismatched_idx=tuple(mismatched[:10]), scoring=scoring)
    differ = [f"{key.replace('_', ' ')} {scoring['run'][key]} here, {scoring['baseline'][key]} in the baseline"
              for key in ("threshold", "embedding_model") if scoring["run"][key] != scoring["baseline"][key]]
    if differ:
        out.comparable = False
        out.reason = "not compared: the runs were scored another way (" + "; ".join(differ) + "), so their verdicts mean different things"
        return out
    ours = [is_correct(mine[i]) for i in common]
    base = [is_correct(theirs[i]) for i in common]
    units = [mine[i].video_key for i in common]
    n, videos = len(common), out.n_common_videos
    out.mcnemar_b = sum(1 for x, y in zip(ours, base) if x and not y)
    out.mcnemar_c = sum(1 for x, y in zip(ours, base) if y and not x)
    if n:
        out.acc_run, out.acc_baseline = 100.0 * sum(ours) / n, 100.0 * sum(base) / n
        out.diff = out.acc_run - out.acc_baseline
    if n == 0:
        out.reason = "no common question (the runs share no question answered with its video" + \
                     (" whose ground truth and options agree)" if mismatched else ")")
    elif not interval_shown(videos):
        out.reason = (f"{videos} common video{'' if videos == 1 else 's'}, fewer than {MIN_INTERVAL_VIDEOS}: "
                      "too few for an interval or a test")
    else:
        interval = paired_difference_interval(ours, base, units, level=out.level)
        out.ci_low, out.ci_high = 100.0 * interval.low, 100.0 * interval.high
        out.clustered_p = clustered_mcnemar(ours, base, units)
        out.mcnemar_p = mcnemar_exact(out.mcnemar_b, out.mcnemar_c)
    return out


def _pct(value: float | None, signed: bool = False) -> str:
    return "—" if value is None else (f"{value:+.1f}" if signed else f"{value:.1f}")


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def paired_markdown(pc: PairedComparison | None) -> list[str]:
    """report.md's "Paired comparison" section (nothing without ``--baseline``)."""
    if pc is None:
        return []
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    s = pc.scoring or {"run": {}, "baseline": {}}
    scored = (f"Scored with threshold {s['run'].get('threshold')} and embedding model {s['run'].get('embedding_model')} "
              f"(the baseline: {s['baseline'].get('threshold')}, {s['baseline'].get('embedding_model')}).")
    out = ["## Paired comparison (--baseline)", ""]
    if not pc.comparable:
        return out + [f"**{cell(pc.run_label)}** against the baseline **{cell(pc.baseline_label)}** (`{pc.baseline_path}`): "
                      f"{pc.reason}. {scored}", ""]
    out += [f"**{cell(pc.run_label)}** against the baseline **{cell(pc.baseline_label)}** (`{pc.baseline_path}`) on the "
            f"{pc.n_common_questions:,} question{'' if pc.n_common_questions == 1 else 's'} ({pc.n_common_videos:,} "
            f"video{'' if pc.n_common_videos == 1 else 's'}) both answered with their video. Accuracy in %, the difference "
            f"in percentage points (this run minus the baseline). {scored}", ""]
    if pc.n_mismatched:
        out += [f"Left out: {pc.n_mismatched} common question{'' if pc.n_mismatched == 1 else 's'} whose ground truth or options "
                f"differ between the two files (idx {', '.join(map(str, pc.mismatched_idx))}"
                f"{', ...' if pc.n_mismatched > len(pc.mismatched_idx) else ''}).", ""]
    ci = "n/a" if pc.ci_low is None else f"[{pc.ci_low:+.1f}, {pc.ci_high:+.1f}]"
    out += ["| This run | Baseline | Difference | 95% interval | Clustered McNemar p | Run right, baseline wrong (b) | "
            "Run wrong, baseline right (c) | Exact McNemar p (assumes independent questions) |",
            "|---:|---:|---:|---|---:|---:|---:|---:|",
            f"| {_pct(pc.acc_run)} | {_pct(pc.acc_baseline)} | {_pct(pc.diff, True)} | {ci} | {_p(pc.clustered_p)} | "
            f"{pc.mcnemar_b} | {pc.mcnemar_c} | {_p(pc.mcnemar_p)} |", ""]
    if pc.reason:
        out += [f"Interval and test n/a: {pc.reason}.", ""]
    out += [f"The interval is a {pc.ci_method}. The test is the {TEST_METHOD}: its variance is taken over videos, "
            "so a video's five or so correlated questions count as one cluster. The exact McNemar test (two-sided, exact "
            f"binomial on b and c) {MCNEMAR_ASSUMPTION}, so its p-value is too small when they move together; it is given "
            "for comparison only. docs/scoring.md has the simulation behind both.", ""]
    return out


def paired_line(pc: PairedComparison) -> str:
    """One line for the terminal: the difference, its interval and the tests (or why they are n/a)."""
    if not pc.comparable:
        return f"paired comparison: {pc.run_label} against {pc.baseline_label}: {pc.reason}"
    head = f"paired comparison: {pc.run_label} minus {pc.baseline_label}: {_pct(pc.diff, True)} points on " \
           f"{pc.n_common_questions:,} common questions ({pc.n_common_videos:,} videos)"
    if pc.reason:
        return f"{head}; interval and tests n/a ({pc.reason})"
    return f"{head}, 95% interval [{pc.ci_low:+.1f}, {pc.ci_high:+.1f}] (cluster-robust t over videos), " \
           f"clustered McNemar p = {pc.clustered_p:.4g}; exact McNemar p = {pc.mcnemar_p:.4g} (b={pc.mcnemar_b}, " \
           f"c={pc.mcnemar_c}; {MCNEMAR_ASSUMPTION})"
