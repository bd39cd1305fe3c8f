"""The answering mode: the questions an annotator answers, their order, and the raw file the answers make.

The questions are the ``--subset`` of the dataset (``--dataset_name``), shown without their options (as
the models get them: the paper's people answered in free form), in an order seeded by the annotator's
name and ``--seed`` (two annotators see different orders; one annotator the same order on every start).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

from k9bench.artifacts import now_iso
from k9bench.people import HUMAN_PREFIX, INSTRUCTION
from k9bench.people.storage import Book

CANNOT_ANSWER = "I cannot answer this from what the video shows."
"""The response recorded when the annotator presses "Cannot answer" (a record the scorers score as wrong)."""

MAX_ANSWER_CHARS = 4000
"""The longest answer taken (a longer one is refused with a message, never cut)."""


def seeded_order(idx: list[int], who: str, seed: int) -> list[int]:
    """``idx`` shuffled by a generator seeded from ``who`` and ``seed`` (the same on every start)."""
    digest = hashlib.sha256(f"{seed}:{who}".encode("utf-8")).hexdigest()
    order = sorted(idx)
    random.Random(int(digest[:16], 16)).shuffle(order)
    return order


def raw_path(output_dir: str | Path, annotator: str) -> Path:
    """``<output_dir>/raw_human-<annotator>.json``."""
    return Path(output_dir) / f"raw_{HUMAN_PREFIX}{annotator}.json"


@dataclass
class AnswerSession:
    """What the app needs for the answering mode (see :mod:`k9bench.people.app`)."""

    annotator: str
    questions: list
    """:class:`k9bench.data.dataset.Question` in the annotator's order."""
    book: Book
    video_dir: Path
    people_block: dict
    """Who, which questions, in which order (written into the raw file)."""

    mode = "answer"
    template = "answer.html"

    @property
    def items(self) -> list:
        return self.questions

    @property
    def who(self) -> str:
        return self.annotator

    def video_of(self, question) -> str:
        return question.video

    def context(self, question) -> dict:
        return {"question": question.question, "category": question.category, "instruction": INSTRUCTION,
                "max_chars": MAX_ANSWER_CHARS}

    def record(self, question, form: dict, seconds: float | None) -> dict:
        """The raw record of one submission; ``ValueError`` with the message to show for an unusable one."""
        cannot = form.get("cannot") == "1"
        text = (form.get("answer") or "").strip()
        if not cannot and not text:
            raise ValueError("Write an answer, or press \"Cannot answer\".")
        if len(text) > MAX_ANSWER_CHARS:
            raise ValueError(f"The answer is {len(text)} characters long; keep it under {MAX_ANSWER_CHARS}.")
        response = CANNOT_ANSWER if cannot else text
        return {**question.record_fields(), "response": response, "answer": response, "prompt": question.question,
                "model_name": f"{HUMAN_PREFIX}{self.annotator}", "timestamp": now_iso(), "annotator": self.annotator,
                "cannot_answer": cannot, "seconds_spent": seconds}


def open_session(annotator: str, questions: list, output_dir: str | Path, video_dir: str | Path, *, seed: int, dataset: str,
                 subset: dict | None) -> AnswerSession:
    """The annotator's session: its questions in their seeded order and the answers already saved."""
    by_idx = {q.idx: q for q in questions}
    order = seeded_order(list(by_idx), annotator, seed)
    block = {"annotator": annotator, "mode": "answer", "seed": seed, "order": order, "dataset": dataset, "subset": subset,
             "instruction": INSTRUCTION, "options_shown": False}

    def export(records: list[dict]) -> dict:
        return {"individual_results": records, "total_count": len(records), "model_name": f"{HUMAN_PREFIX}{annotator}",
                "people": {**block, "answered": len(records), "questions": len(order), "updated_at": now_iso()}}

    book = Book(raw_path(output_dir, annotator), export)
    return AnswerSession(annotator=annotator, questions=[by_idx[i] for i in order], book=book, video_dir=Path(video_dir),
                         people_block=block)
