"""Reading a judge reply into five scores, the reference's way (SPEC sections 5 and 9).

The last ``{...}`` block of the reply is read as JSON, else as a Python literal (single quotes);
code fences are ignored. The five keys of :data:`AXES` must be there, spelled exactly (a
lower-case ``'logic'`` is not ``'Logic'``: the entry is skipped, as the reference skips it). Each
score goes through the reference's ``int()``:

=====================================  ==============================  =====================
the judge wrote                        default (the reference's)        ``--strict_scores``
=====================================  ==============================  =====================
an integer 1-10                        kept                             kept
an integer out of 1-10 (0, 11, -3)     kept as given, flagged           refused
a numeric string (``"9"``)             its number, flagged              its number, flagged
a non-integer (``7.5``)                truncated toward zero, flagged   the same, if in 1-10
``true`` / ``false``                   1 / 0, flagged                   refused
``NaN``, ``null``, a word, ``"7.5"``   refused                          refused
=====================================  ==============================  =====================

"Flagged" means listed in :attr:`Judgement.adjustments` (the entry's ``score_adjustments``) with
the value as the judge wrote it. Extra keys are kept in the scores, after the five axes, as the
judge wrote them. A refused reply raises :class:`JudgeParseError`; the run turns it into a
skipped entry with the reason and the raw reply, never into a score.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from k9bench.data.published import AXIS_KEYS

AXES = ("Logic", "Factuality", "Accuracy", "Conciseness", "Overall")
"""The five score keys the judge must return, spelled exactly, in the rubric's order (the same keys as
:data:`k9bench.data.published.AXIS_KEYS`' values)."""

TABLE3_AXES = tuple(AXIS_KEYS.items())
"""(paper column, score key) in the order of the paper's Table 3 (:data:`k9bench.data.published.AXIS_KEYS`)."""

SCORE_RANGE = (1, 10)
"""The rubric's range; outside it a score is kept and flagged (or refused with ``--strict_scores``)."""

_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?|```")
_BLOCK = re.compile(r"\{[^{}]*\}", re.S)
_COT = re.compile(r"^[ \t>*_#-]*CoT[ \t*_]*:[ \t*_]*(.*)$", re.I | re.M)
_INT_TEXT = re.compile(r"^\s*[+-]?\d{1,6}\s*$")


class JudgeParseError(ValueError):
    """A judge reply that holds no usable score dictionary; the message says why."""


@dataclass
class Judgement:
    """A parsed judge reply."""

    scores: dict
    """The five axes (integers, :data:`AXES` order), then any extra keys as the judge wrote them."""
    cot: str
    """The text of the ``CoT:`` line ("" when the judge wrote none)."""
    adjustments: dict = field(default_factory=dict)
    """Axis -> the value as the judge wrote it, for each score that was not a plain integer in 1-10
    (a numeric string, a truncated non-integer, a bool, or an integer out of range)."""

    @property
    def out_of_range(self) -> list[str]:
        """Axes whose kept score lies outside 1-10."""
        low, high = SCORE_RANGE
        return [a for a in AXES if not low <= self.scores[a] <= high]


def read_score(axis: str, value: Any, *, strict: bool = False) -> tuple[int, bool]:
    """``(score, flagged)``: ``value`` read as the reference's ``int()`` reads it (see the module doc);
    :class:`JudgeParseError` for what ``int()`` refuses, and, with ``strict``, for a bool or a score
    out of 1-10."""
    number: Any = value
    flagged = False
    if isinstance(value, bool):
        if strict:
            raise JudgeParseError(f"score {axis!r} is {value!r}, not an integer 1-10")
        number, flagged = int(value), True
    elif isinstance(value, str) and _INT_TEXT.match(value):
        number, flagged = int(value), True
    elif isinstance(value, float) and math.isfinite(value):
        number = int(value)  # toward zero, as int() does
        flagged = number != value
    if isinstance(number, bool) or not isinstance(number, int):
        raise JudgeParseError(f"score {axis!r} is {value!r:.60}, not an integer")
    low, high = SCORE_RANGE
    if not low <= number <= high:
        if strict:
            shown = f"{value!r} ({number} after truncation)" if isinstance(value, float) and number != value else (
                repr(value) if isinstance(value, str) else str(value))
            raise JudgeParseError(f"score {axis!r} is {shown}, outside 1-10 (--strict_scores)")
        flagged = True
    return number, flagged


def stored_score(axis: str, value: Any) -> int:
    """A score as stored in a judge file: an integer (out-of-range integers are kept by default, so
    they are accepted here); a string, a float, NaN or a bool raises :class:`JudgeParseError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise JudgeParseError(f"score {axis!r} is {value!r:.60} (type {type(value).__name__}), not an integer")
    return value


def _last_block(text: str) -> tuple[re.Match, dict]:
    blocks = list(_BLOCK.finditer(text))
    if not blocks:
        raise JudgeParseError("no {...} score dictionary in the reply")
    block = blocks[-1]
    raw = block.group(0)
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        try:
            data = ast.literal_eval(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise JudgeParseError(f"the last {{...}} block is neither JSON nor a Python dict: {raw[:200]!r}") from None
    if not isinstance(data, dict):
        raise JudgeParseError(f"the last {{...}} block is a {type(data).__name__}, not a dictionary")
    return block, data


def _cot(text: str, block_start: int) -> str:
    head = text[:block_start]
    in_head = list(_COT.finditer(head))
    if in_head:
        # the CoT runs from its label to the score block (it may span lines)
        cot_text = head[in_head[-1].start(1):]
        earlier = _BLOCK.search(cot_text)
        if earlier:  # stop at an earlier dictionary the judge wrote before the final one
            cot_text = cot_text[: earlier.start()]
    else:
        anywhere = list(_COT.finditer(text))
        cot_text = anywhere[-1].group(1) if anywhere else ""
    return " ".join(cot_text.split()).strip(" *_")


def parse_judgement(reply: str | None, *, strict: bool = False) -> Judgement:
    """Parse a judge reply (see the module doc); :class:`JudgeParseError` unless it ends in a score
    dictionary with the five exact keys and readable scores."""
    if reply is None or not reply.strip():
        raise JudgeParseError("empty reply")
    text = _FENCE.sub("\n", reply)
    block, data = _last_block(text)
    missing = [a for a in AXES if a not in data]
    if missing:
        near = [str(k) for k in data if str(k).strip().lower() in {a.lower() for a in missing}]
        hint = f" (found {', '.join(repr(k) for k in near)}: keys are matched exactly, as the reference does)" if near else ""
        raise JudgeParseError(f"missing score key(s): {', '.join(missing)}{hint}")
    scores: dict[str, Any] = {}
    adjustments: dict[str, Any] = {}
    for axis in AXES:
        scores[axis], flagged = read_score(axis, data[axis], strict=strict)
        if flagged:
            adjustments[axis] = data[axis]
    for key, value in data.items():  # extra keys: kept as written, after the axes
        if key not in AXES:
            scores[str(key)] = value
    return Judgement(scores=scores, cot=_cot(text, block.start()), adjustments=adjustments)


__all__ = ["AXES", "TABLE3_AXES", "SCORE_RANGE", "JudgeParseError", "Judgement", "parse_judgement", "read_score", "stored_score"]
