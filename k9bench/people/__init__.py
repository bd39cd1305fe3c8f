"""People in the loop: the paper's human baseline (Table 4) and its failure-mode labels (Figure 3(b)).

Two local web modes (:mod:`k9bench.people.app`, started by ``python -m k9bench.people``) and one stage:

``answer``
    an annotator watches each video (with its sound) and answers the question in free form, without the
    options, as the paper's people did; each answer is saved the moment it is submitted. The answers are a
    raw file (``model_name`` ``human-<annotator>``) that calculate, evaluate, the judge and the report take
    as they take a model's.
``label``
    a labeller sorts a seeded, category-stratified sample of a model's wrong answers into the failure types
    of :data:`FAILURE_TYPES` (:mod:`k9bench.people.labels`).
``llm-label``
    the LLM labeller (:mod:`k9bench.people.labeller`): the same labels from an OpenAI-compatible model,
    through the judge's machinery (reply store, concurrency, resume).

The report (:mod:`k9bench.report.people`) draws the human row, the labels per model and the agreement
between labellers (Cohen's kappa, :mod:`k9bench.people.agreement`). See docs/people.md.
"""

from __future__ import annotations

FAILURE_TYPES: dict[str, str] = {
    "cue_misread": "Observable cue misread: the dog's visible signals (posture, ears, tail, eyes, head, which way it faces) or "
                   "where things are in the scene were missed or read wrongly.",
    "sequence_error": "Action sequence error: events were put in the wrong order, or a step was left out.",
    "causal_misattribution": "Causal misattribution: the answer names the wrong trigger or the wrong effect.",
    "overgeneralisation": "Overgeneralisation: a vague, generic description where the question asks for a specific one.",
}
"""The four failure types of the paper's Figure 3(b), in this project's words (key -> description)."""

OTHER_LABELS: dict[str, str] = {
    "scoring_wrong": "The scoring was wrong: the answer is in fact right (or as good as the marked option).",
    "other": "Other (say what in the note).",
}
"""The labels beside the four failure types."""

LABELS: dict[str, str] = {**FAILURE_TYPES, **OTHER_LABELS}
"""Every label a labeller may give, in the order shown."""

SHORT_NAMES: dict[str, str] = {
    "cue_misread": "observable cue", "sequence_error": "action sequence", "causal_misattribution": "causal",
    "overgeneralisation": "overgeneralisation", "scoring_wrong": "scoring wrong", "other": "other",
}
"""Each label's short name (charts, tables)."""

HUMAN_PREFIX = "human-"
"""A person's answers carry ``model_name`` ``human-<annotator>``."""

INSTRUCTION = ("Watch the video (with its sound) and answer the question in your own words, from what you can see and hear. "
               "Do not guess at the dog's intent or feelings beyond what is visible. If the video does not let you answer, "
               "press \"Cannot answer\".")
"""What an annotator is told (the paper's instruction: answer from what can be observed), in our words."""
