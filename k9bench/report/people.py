"""The report's people sections: the human row (the paper's Table 4 layout) and why the models are wrong
(the paper's Figure 3(b) layout), with the agreement between labellers.

- **The human row.** A judge file whose judged answers are a person's (``model_name`` ``human-<annotator>``,
  :mod:`k9bench.people.answering`) is a person's row: the judge's Accuracy axis (0-100), as Table 4 gives
  it. The people's mean and each person are shown beside the models' judge rows, and the paper's Table 4
  rows with ``--published`` (``matching``: the human row and the models of this report; ``all``: every row).
- **Failure labels** (``--failure_labels FILE...``: labels files of people, ``python -m k9bench.people label``,
  and of the LLM labeller, ``python -m k9bench.people llm-label``). Per model: where people and a labeller
  labelled the same answers, Cohen's kappa with its bootstrap interval and the confusion table come
  first (:mod:`k9bench.people.agreement`); then each source's shares of the labels with their counts and
  95% Wilson intervals, as a table and as a chart (``failure_modes_<model>.png``).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from k9bench.artifact_io import ArtifactError
from k9bench.people import HUMAN_PREFIX, LABELS, SHORT_NAMES
from k9bench.people.agreement import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED, Agreement, agreement
from k9bench.people.labels import LabelsFile, read_labels_file

log = logging.getLogger("k9bench.report")

ACCURACY_AXIS = "Accuracy"
"""The judge axis Table 4 reports."""

PAPER_FIGURE3B = "The paper labelled 105 wrong answers of Gemini-2.5 Pro (A+V): 48.0% were observable-cue misreadings."


def _judged_model(judge) -> str | None:
    """The ``model_name`` of the answers a judge file judged (from its meta sidecar's input), or None."""
    from k9bench.artifacts import load_records_artifact
    from k9bench.report.load import judge_meta

    source = judge_meta(judge.path).judged.evaluations
    if not source or not Path(str(source)).is_file():
        return None
    try:
        names = Counter(r.model_name for r in load_records_artifact(source).records if r.model_name)
    except ArtifactError:
        return None
    return names.most_common(1)[0][0] if names else None


def is_human(judge) -> bool:
    """True for a judge row of a person's answers."""
    named = judge.model or _judged_model(judge) or judge.label
    return str(named).startswith(HUMAN_PREFIX) or str(judge.label).startswith(HUMAN_PREFIX)


@dataclass
class LabelShares:
    """One source's labels of one model's wrong answers."""

    source: str
    """``people`` or the labeller's name."""
    counts: dict
    total: int

    def share(self, label: str) -> tuple[float, tuple[float, float]]:
        """Share (%) of ``label`` and its 95% Wilson interval (%)."""
        from scipy.stats import binomtest

        k = self.counts.get(label, 0)
        ci = binomtest(k, self.total).proportion_ci(method="wilson")
        return 100.0 * k / self.total, (100.0 * ci.low, 100.0 * ci.high)


@dataclass
class ModelLabels:
    model: str
    sources: list
    """:class:`LabelShares`: people first, then each LLM labeller."""
    agreements: list
    """:class:`Agreement` of each pair of labels files of this model that share answers."""
    files: list


@dataclass
class PeopleReport:
    humans: list = field(default_factory=list)
    """Judge rows of people."""
    models: list = field(default_factory=list)
    """Judge rows of models."""
    labels: list = field(default_factory=list)
    """:class:`ModelLabels` per model."""

    def page_labels(self) -> dict:
        """model -> idx -> the labels given to that answer, as one line of text (the results page's)."""
        out: dict = {}
        for m in self.labels:
            for path in m.files:
                f = read_labels_file(path)
                for idx, label in sorted(f.labels.items()):
                    line = out.setdefault(m.model, {}).get(idx)
                    text = f"{f.labeller}: {SHORT_NAMES[label]}"
                    out[m.model][idx] = f"{line}; {text}" if line else text
        return out

    def to_dict(self) -> dict:
        return {
            "humans": [{"label": j.label, "accuracy": j.scores.get(ACCURACY_AXIS), "scored": j.scored, "path": j.path} for j in self.humans],
            "human_mean_accuracy": human_mean(self.humans),
            "failure_labels": [{"model": m.model, "files": m.files, "agreements": [a.to_dict() for a in m.agreements],
                                "sources": [{"source": s.source, "total": s.total, "counts": s.counts} for s in m.sources]}
                               for m in self.labels],
        }


def human_mean(humans: list) -> float | None:
    values = [j.scores[ACCURACY_AXIS] for j in humans if j.scored]
    return sum(values) / len(values) if values else None


def accuracy_by_idx(path: str) -> dict:
    """idx -> the judge's Accuracy (0-100) of each entry of a judge file with one (others left out)."""
    from k9bench.artifact_io import read_json
    from k9bench.data.published import AXIS_KEYS

    data = read_json(path)
    out = {}
    for entry in data if isinstance(data, list) else []:
        value = (entry.get("scores") or {}).get(AXIS_KEYS[ACCURACY_AXIS]) if isinstance(entry, dict) else None
        if isinstance(entry.get("idx") if isinstance(entry, dict) else None, int) and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            out[entry["idx"]] = 10.0 * value
    return out


def on_questions(scores: dict, idx: set) -> tuple[float | None, int]:
    """Mean of ``scores`` over ``idx`` (those it has) and how many it had."""
    values = [scores[i] for i in idx if i in scores]
    return (sum(values) / len(values) if values else None), len(values)


def _model_labels(model: str, files: list[LabelsFile]) -> ModelLabels:
    people = [f for f in files if f.kind == "person"]
    sources = []
    if people:
        pooled = Counter(label for f in people for label in f.labels.values())
        sources.append(LabelShares("people", dict(pooled), sum(pooled.values())))
    for f in files:
        if f.kind == "llm":
            sources.append(LabelShares(f"LLM {f.labeller}", dict(Counter(f.labels.values())), len(f.labels)))
    pairs = []
    for i, a in enumerate(files):
        for b in files[i + 1:]:
            if a.kind == "llm" and b.kind == "person":
                a, b = b, a
            found = agreement(f"{a.kind} {a.labeller}", a.labels, f"{b.kind} {b.labeller}", b.labels)
            if found is not None:
                pairs.append(found)
    return ModelLabels(model=model, sources=sources, agreements=pairs, files=[f.path for f in files])


def people_report(judges: list, label_files: list | None) -> PeopleReport | None:
    """The people sections' content (None when there is neither a person's judge row nor a labels file).
    A bad labels file is an :class:`ArtifactError` naming it."""
    humans = [j for j in judges if is_human(j)]
    files = [read_labels_file(p) for p in (label_files or [])]
    if not humans and not files:
        return None
    by_model: dict[str, list] = {}
    for f in files:
        by_model.setdefault(f.model, []).append(f)
    return PeopleReport(humans=humans, models=[j for j in judges if j not in humans],
                        labels=[_model_labels(m, fs) for m, fs in sorted(by_model.items())])


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _published_rows(people: PeopleReport, mode: str) -> list[tuple[str, float]]:
    """The paper's Table 4 rows (:data:`k9bench.data.published.TABLE_4`) to show: none, those of this report's models
    and the people's (``matching``), or all."""
    from k9bench.data.published import HUMAN, TABLE_4, normalize_model_name

    if mode == "none" or not people.humans:
        return []
    shown = {normalize_model_name(j.model or j.label) for j in people.models}
    return [(row.model if row.model == HUMAN else f"{row.model} ({row.setting})", row.judge[ACCURACY_AXIS]) for row in TABLE_4
            if mode == "all" or row.model == HUMAN or normalize_model_name(row.model) in shown]


def human_markdown(people: PeopleReport, published: str) -> list[str]:
    """The human row beside the models (Table 4 layout): each row's judge Accuracy on the questions every person
    answered (as the paper compares them), then on everything it was judged on."""
    if not people.humans:
        return []
    by_idx = {j.path: accuracy_by_idx(j.path) for j in [*people.humans, *people.models]}
    common = set.intersection(*(set(by_idx[j.path]) for j in people.humans))
    rows = []
    for j in people.models:
        value, n = on_questions(by_idx[j.path], common)
        rows.append((value, _cell(j.label), "this run (model)", n, j))
    each = [on_questions(by_idx[j.path], common) for j in people.humans]
    shown = [v for v, _ in each if v is not None]
    mean = sum(shown) / len(shown) if shown else None
    rows.append((mean, f"**people (mean of {len(people.humans)})**", "this run (people)", len(common), None))
    lines = ["## People vs models (paper's Table 4 layout)", "",
             "The judge's Accuracy axis (0–100) of free-form answers: people's answers (`python -m k9bench.people answer`) "
             f"judged as the models' are, on the {len(common)} question{'' if len(common) == 1 else 's'} every person answered "
             "(the paper's comparison), then on all that each row was judged on. Each person's row is below the people's mean.", "",
             "| Row | Source | Accuracy, people's questions | n | Accuracy, all judged | n |", "|---|---|---:|---:|---:|---:|"]

    def fmt(value) -> str:
        return "—" if value is None else f"{value:.1f}"

    for value, label, source, n, judge in sorted(rows, key=lambda r: -(r[0] if r[0] is not None else -1)):
        if judge is None:
            lines.append(f"| {label} | {source} | {fmt(value)} | {n} | {fmt(human_mean(people.humans))} | "
                         f"{', '.join(str(j.scored) for j in people.humans)} |")
            for j, (own, own_n) in zip(people.humans, each):
                lines.append(f"| &nbsp;&nbsp;{_cell(j.label)} | person | {fmt(own)} | {own_n} | "
                             f"{fmt(j.scores.get(ACCURACY_AXIS))} | {j.scored} |")
        else:
            lines.append(f"| {label} | {source} | {fmt(value)} | {n} | {fmt(judge.scores.get(ACCURACY_AXIS))} | {judge.scored} |")
    for name, value in _published_rows(people, published):
        lines.append(f"| {_cell(name)} | paper | {value:.1f} | 100 | — | — |")
    lines.append("")
    if _published_rows(people, published):
        lines += ["Rows marked `paper` are the paper's Table 4 (three people, 100 questions whose ids are not published, so "
                  "they are not this report's questions).", ""]
    return lines


def _agreement_lines(a: Agreement) -> list[str]:
    kappa = "undefined (one label only)" if a.kappa is None else f"{a.kappa:.2f}"
    interval = f" [95% CI {a.interval[0]:.2f}, {a.interval[1]:.2f}]" if a.interval else " [CI n/a]"
    order = [k for k in LABELS if k in a.confusion or any(k in row for row in a.confusion.values())]
    lines = [f"**{_cell(a.first)} vs {_cell(a.second)}**: {a.count} answers labelled by both, same label on "
             f"{100 * a.observed:.0f}%; Cohen's kappa {kappa}{interval}.", "",
             f"| {_cell(a.first)} ↓ / {_cell(a.second)} → | " + " | ".join(SHORT_NAMES[k] for k in order) + " |",
             "|---|" + "---:|" * len(order)]
    for row in order:
        lines.append(f"| {SHORT_NAMES[row]} | " + " | ".join(str(a.confusion.get(row, {}).get(col, 0)) for col in order) + " |")
    return lines + [""]


def labels_markdown(people: PeopleReport, plots: dict) -> list[str]:
    """Agreement first, then the shares, per model (Figure 3(b) layout)."""
    if not people.labels:
        return []
    out = ["## Why the models are wrong (paper's Figure 3(b) layout)", "",
           "Failure types of wrong answers (docs/people.md says what each means). Where two labellers labelled the same "
           f"answers, their agreement comes first: Cohen's kappa with a 95% bootstrap interval ({BOOTSTRAP_SAMPLES} resamples "
           f"of the answers, seed {BOOTSTRAP_SEED}) and the confusion table. Shares carry their count and a 95% Wilson "
           f"interval. {PAPER_FIGURE3B}", ""]
    for m in people.labels:
        out += [f"### {_cell(m.model)}", ""]
        for a in m.agreements:
            out += _agreement_lines(a)
        head = "| Failure type | " + " | ".join(f"{_cell(s.source)} (n={s.total})" for s in m.sources) + " |"
        out += [head, "|---|" + "---:|" * len(m.sources)]
        for key in LABELS:
            cells = []
            for s in m.sources:
                share, (low, high) = s.share(key)
                cells.append(f"{s.counts.get(key, 0)} ({share:.1f}% [{low:.1f}, {high:.1f}])")
            out.append(f"| {SHORT_NAMES[key]} | " + " | ".join(cells) + " |")
        out.append("")
        chart = plots.get(f"failure_modes_{m.model}")
        if chart:
            out += [f"The chart: `{Path(chart).name}` (under Plots).", ""]
    return out


def people_markdown(people: PeopleReport | None, published: str, plots: dict) -> list[str]:
    """Both sections (nothing without people content)."""
    if people is None:
        return []
    return human_markdown(people, published) + labels_markdown(people, plots)


def _file_name(model: str) -> str:
    return "failure_modes_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", model) + ".png"


def failure_figure(m: ModelLabels, stamp: list[str]):
    """Grouped bars: each failure type's share per source, with its interval and count."""
    from k9bench.report.plots import Series, _pyplot, add_stamp, grouped_bars

    if not m.sources:
        return None
    plt = _pyplot()
    width = max(7.0, 1.3 * len(LABELS) * max(len(m.sources), 1) / 2 + 2)
    fig, ax = plt.subplots(figsize=(width, 4.6))
    series = []
    for s in m.sources:
        shares = [s.share(k) for k in LABELS]
        series.append(Series(label=f"{s.source} (n={s.total})", values=[v for v, _ in shares], cis=[ci for _, ci in shares],
                             ns=[s.counts.get(k, 0) for k in LABELS]))
    grouped_bars(ax, [SHORT_NAMES[k] for k in LABELS], series, [[False] * len(LABELS) for _ in series])
    ax.set_ylabel("share of the labelled wrong answers (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Why {m.model} is wrong")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(len(series), 3), frameon=False)
    add_stamp(fig, stamp, width)
    return fig


def write_people_plots(people: PeopleReport | None, folder: Path, stamp: list[str]) -> dict:
    """One chart per model with labels: ``failure_modes_<model>`` -> path."""
    from k9bench.report.plots import save

    if people is None:
        return {}
    return {f"failure_modes_{m.model}": save(failure_figure(m, stamp), Path(folder) / _file_name(m.model)) for m in people.labels}
