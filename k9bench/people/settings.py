"""The settings of ``python -m k9bench.people`` (frozen dataclasses; the flags are generated from them)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from k9bench.download.settings import DEFAULT_VIDEO_DIR
from k9bench.settings import setting
from k9bench.validators import non_negative_int, positive_int

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


def person_name(text: str) -> str:
    """An annotator's or labeller's name: it becomes part of a file name."""
    if not NAME_RE.match(text or ""):
        raise argparse.ArgumentTypeError(f"{text!r}: use 1-40 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return text


def port_number(text: str) -> int:
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value}: a port is 0-65535 (0: any free port)")
    return value


@dataclass(frozen=True)
class ServeSettings:
    """Where the app listens."""

    host: str = setting("127.0.0.1", "interface to listen on (default: %(default)s, this machine only); another one needs "
                        "--allow_remote")
    port: int = setting(0, "port (default: %(default)s, any free port; the URL printed names it)", type=port_number)
    allow_remote: bool = setting(False, "allow --host to be an interface other machines can reach (anyone with the URL can "
                                 "then write answers)", action="store_true")


@dataclass(frozen=True)
class AnswerSettings:
    """``answer``: an annotator answers a subset's questions in free form."""

    subset: str = setting(None, "the questions to answer, a file: a subset file, a JSON or text list of idx, or a run's file (python -m k9bench.data.subset)",
                          required=True, metavar="FILE")
    annotator: str = setting(None, "the annotator's name (their answers are model_name human-NAME)", type=person_name, required=True)
    output_dir: str = setting(None, "folder of raw_human-NAME.json (and its checkpoint)", required=True, metavar="DIR")
    video_dir: str = setting(DEFAULT_VIDEO_DIR, "folder of {scene_name}.mp4 files (default: %(default)s)", metavar="DIR")
    seed: int = setting(0, "seed of the question order, mixed with the annotator's name (default: %(default)s)", type=non_negative_int)


@dataclass(frozen=True)
class LabelSettings:
    """``label``: a labeller sorts a model's wrong answers into failure types."""

    eval_file: str = setting(None, "the model's eval file (evaluate_results.py --mode evaluate)", cli=False)
    labeller: str = setting(None, "the labeller's name", type=person_name, required=True)
    output_dir: str = setting(None, "folder of labels_NAME_MODEL.json (and its checkpoint)", required=True, metavar="DIR")
    video_dir: str = setting(DEFAULT_VIDEO_DIR, "folder of {scene_name}.mp4 files (default: %(default)s)", metavar="DIR")
    sample: int | None = setting(None, "label N wrong answers, stratified by category (default: all of them; the paper labelled 105)",
                                 type=positive_int, metavar="N")
    seed: int = setting(0, "seed of the sample and its order (default: %(default)s)", type=non_negative_int)
