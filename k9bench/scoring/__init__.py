"""The scoring stage (``evaluate_results.py``): the reference's "fine" rule, ``calculate`` (raw -> sim)
and ``evaluate`` (sim -> eval), behind the stage contract (:mod:`k9bench.stage`).

A record is correct when the similarity between the model's answer and the ground-truth option is
above the threshold AND no other option is *strictly* more similar (a tie with the ground truth counts
as correct); accuracy is correct / total over all records (SPEC section 4). The defaults are the
reference's: every record with an answer string, an empty or blank one included, is decided by the
rule (such answers are flagged and counted, never overridden), and a failed sample carries 0.0 for
each option next to its ``error``, so the reference's evaluate reads our sim files and finds it wrong.

The package:

- :mod:`~k9bench.scoring.rule`: the rule, the record checks, reading a file for scoring;
- :mod:`~k9bench.scoring.calculate`: raw -> sim (the embedding model is :mod:`k9bench.scoring.embedding`);
- :mod:`~k9bench.scoring.evaluate`: sim -> eval, our statistics, the printed table;
- :mod:`~k9bench.scoring.stages`: ``build_parser``, ``config_from_argv``, :class:`CalculateStage`,
  :class:`EvaluateStage` (the names the launcher imports).

Settings are the frozen dataclasses of :mod:`k9bench.scoring.settings`.
"""

from k9bench.scoring.embedding import EmbeddingError, EmbeddingRun, ScoringItem, load_embedding_model
from k9bench.scoring.calculate import FAILED_SIMILARITY, calculate, plan_calculation
from k9bench.scoring.evaluate import RecordOutcome, evaluate, format_table
from k9bench.scoring.rule import (
    EVAL_MODE,
    FLAG_BLANK,
    FLAG_EMPTY,
    SKIP_FAILED,
    Verdict,
    fine_verdict,
    is_correct_fine,
    load_for_scoring,
    normalise_ground_truth,
    option_letters,
)
from k9bench.scoring.stages import CalculateStage, EvaluateStage, build_parser, config_from_argv, default_output_path, run_scoring
from k9bench.scoring.settings import DEFAULT_EMBEDDING_MODEL, DEFAULT_THRESHOLD, EvalSettings, ScoringConfig, ScoringError

__all__ = [
    "DEFAULT_EMBEDDING_MODEL", "DEFAULT_THRESHOLD", "EVAL_MODE", "FAILED_SIMILARITY", "FLAG_BLANK", "FLAG_EMPTY", "SKIP_FAILED",
    "CalculateStage", "EmbeddingError", "EmbeddingRun", "EvalSettings", "EvaluateStage", "RecordOutcome", "ScoringConfig",
    "ScoringError", "ScoringItem", "Verdict", "build_parser", "calculate", "config_from_argv", "default_output_path", "evaluate",
    "fine_verdict", "format_table", "is_correct_fine", "load_embedding_model", "load_for_scoring", "normalise_ground_truth",
    "option_letters", "plan_calculation", "run_scoring",
]
