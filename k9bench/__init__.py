"""k9bench: shared logic behind the K9-Bench evaluation scripts.

The four scripts at the repository root are thin front ends over the stages here: ``eval_video_llm.py``
(raw) -> ``evaluate_results.py`` (sim, eval) -> ``subjective_evals.py`` (judge) -> ``evaluate_results.py
--mode report``; ``python -m k9bench.pipeline`` (which ``run_eval.sh`` execs) chains them, each through the
one :class:`k9bench.stage.Stage` contract. docs/architecture.md describes the design and lists every module
(its "Modules" section, the one module table: ``tests/test_package_layout.py`` checks it).
"""

__version__ = "0.1.0"

CATEGORIES = (
    "posture analysis",
    "action sequence",
    "context analysis",
    "cause-effect analysis",
    "interaction analysis",
)
"""The five K9-Bench categories, spelled exactly as in the released data."""

LETTERS = ("A", "B", "C", "D", "E")
"""Option letters, in order."""
