"""Settings of the scoring stage (``evaluate_results.py``): one frozen dataclass per concern.

Each field carries its type, default, flag and help (:func:`k9bench.settings.setting`);
``evaluate_results.py`` generates its flags from them and builds the objects once in ``main()``.
The engines (:mod:`k9bench.scoring.embedding`, :mod:`k9bench.scoring`) take these objects, never an
``argparse.Namespace``. Each object checks its own values in ``__post_init__`` (a
:class:`ValueError` naming the flag), so a bad value is refused before any file is read or any
model is loaded, whoever builds the object.

- :class:`ScoringFiles`: mode, input, outputs.
- :class:`EmbeddingSettings`: the embedding model and how it runs (``calculate``, ``all``).
- :class:`EvalSettings`: the fine rule's threshold and our statistics (``evaluate``, ``all``).

- :class:`ScoringConfig`: the three, plus how the run logs (what ``config_from_argv`` returns).

Also the stage's error type, :class:`ScoringError` (here so that the embedding and the rule halves
share it without importing each other).
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError
from dataclasses import dataclass, field
from typing import Any

from k9bench.settings import setting
from k9bench.stage import EXIT_FAILED, StageError
from k9bench.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, MAX_RESAMPLES
from k9bench.validators import device_name

DEFAULT_EMBEDDING_MODEL = "Qwen/Qwen3-Embedding-8B"
"""The reference's embedding model."""
DEFAULT_THRESHOLD = 0.5
"""The reference's similarity threshold."""
DEFAULT_BATCH_SIZE = 32
"""Texts per forward pass in ``calculate`` (a CPU sweet spot; raise it on a big GPU)."""
MAX_BATCH_SIZE = 65536
"""Largest ``--batch_size`` accepted (larger is a typo, not a plan)."""
SENSITIVITY_THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7)
"""Thresholds of the sensitivity row (plus argmax alone)."""
MAX_SEED = 2**32 - 1
"""Largest ``--seed`` (numpy's seed range)."""
MODES = ("calculate", "evaluate", "all", "report")
"""``--mode`` values."""
DTYPE_FLAG_CHOICES = ("auto", "bfloat16", "float16", "float32")
"""``--dtype`` values (``auto``: float32, see :class:`EmbeddingSettings`)."""
ATTENTION_FLAG_CHOICES = ("auto", "flash_attention_2", "sdpa", "eager")
"""``--attn_implementation`` values."""


class ScoringError(StageError):
    """Bad input or a failed model load in the scoring stage; the message names the file, record idx or
    model. Exit 1, the scoring script's documented exit for a bad input file."""

    exit_code = EXIT_FAILED


def _unit(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be finite numbers (got {value!r})")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1] (got {value:g})")


@dataclass(frozen=True)
class ScoringFiles:
    """What to do and on which files."""

    mode: str = setting(None, "calculate: raw -> sim JSON; evaluate: sim -> eval JSON; all: both; report: leaderboard",
                        choices=MODES, required=True)
    input_file: tuple = setting(None, "input JSON (raw for calculate/all, sim for evaluate; several eval files for report)",
                                nargs="+", required=True)
    output_file: str | None = setting(None, "output JSON (default: beside the input, raw_/sim_ prefix replaced by sim_/eval_)")
    sim_file: str | None = setting(None, "--mode all: where to write the sim JSON (default: derived from --output_file or the input)")
    subset: str | None = setting(None, "restrict to these questions: a subset file (python -m k9bench.data.subset), a JSON file listing idx, or "
                                       "another run's raw/sim/eval file (the questions whose video it had); calculate, evaluate, "
                                       "all and report", metavar="FILE")

    def __post_init__(self) -> None:
        if isinstance(self.input_file, list):
            object.__setattr__(self, "input_file", tuple(self.input_file))


@dataclass(frozen=True)
class EmbeddingSettings:
    """The embedding model and how it runs (``calculate`` and ``all``)."""

    embedding_model: str = setting(DEFAULT_EMBEDDING_MODEL, "sentence-transformers model id or local folder (default: %(default)s)",
                                   result=True)
    batch_size: int = setting(DEFAULT_BATCH_SIZE,
                              "texts per forward pass (default: %(default)s; halved automatically on GPU out-of-memory). "
                              "In float32 the similarities do not depend on it",
                              type=int)
    device: str = setting("auto", "auto (cuda when available), cpu, cuda, cuda:N or mps (default: %(default)s)", type=device_name)
    dtype: str = setting("auto", "weight dtype; auto = float32 on GPU and CPU: the batched similarities then equal the "
                                 "one-record-at-a-time ones and verdicts are reproduced. bfloat16 (the reference's "
                                 "inference dtype) is faster on a GPU but moves similarities by ~1e-3, which can flip "
                                 "near-tie verdicts; it is recorded in the sim file (default: %(default)s)",
                         choices=DTYPE_FLAG_CHOICES, result=True)
    attn_implementation: str = setting("auto", "attention kernel; auto = flash_attention_2 on GPU when installed, else sdpa "
                                               "(logged and recorded) (default: %(default)s)",
                                       choices=ATTENTION_FLAG_CHOICES)
    trust_remote_code: bool = setting(False, "allow the model's own code (some embedding models need it)", action="store_true")

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"--batch_size must be at least 1 (got {self.batch_size})")
        if self.batch_size > MAX_BATCH_SIZE:
            raise ValueError(f"--batch_size must be at most {MAX_BATCH_SIZE} (got {self.batch_size})")
        if self.dtype not in DTYPE_FLAG_CHOICES:
            raise ValueError(f"--dtype {self.dtype!r}: choose one of {', '.join(DTYPE_FLAG_CHOICES)}")
        if self.attn_implementation not in ATTENTION_FLAG_CHOICES:
            raise ValueError(f"--attn_implementation {self.attn_implementation!r}: choose one of {', '.join(ATTENTION_FLAG_CHOICES)}")
        if not str(self.embedding_model).strip():
            raise ValueError("--embedding_model is empty")
        try:  # the flag's own rule, for settings built in code too
            device_name(self.device)
        except ArgumentTypeError as exc:
            raise ValueError(f"--device {self.device!r}: {exc}") from None


@dataclass(frozen=True)
class EvalSettings:
    """The fine rule's threshold and the statistics beyond the reference (``evaluate`` and ``all``)."""

    threshold: float = setting(DEFAULT_THRESHOLD, "similarity the ground truth must exceed (default: %(default)s)",
                               type=float, result=True)
    bootstrap_resamples: int = setting(DEFAULT_RESAMPLES,
                                       "bootstrap replicates for the 95%% intervals, resampling videos; 0 turns them off "
                                       f"(at most {MAX_RESAMPLES:,}) (default: %(default)s)", type=int)
    seed: int = setting(DEFAULT_SEED, f"bootstrap seed, 0 to {MAX_SEED} (default: %(default)s)", type=int)
    sensitivity_thresholds: tuple = setting(SENSITIVITY_THRESHOLDS,
                                            "thresholds of the sensitivity row, besides argmax alone (default: %(default)s)",
                                            type=float, nargs="+")

    def __post_init__(self) -> None:
        if isinstance(self.sensitivity_thresholds, list):
            object.__setattr__(self, "sensitivity_thresholds", tuple(self.sensitivity_thresholds))
        bad = [t for t in (self.threshold, *self.sensitivity_thresholds)
               if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)]
        if bad:
            raise ValueError(f"--threshold and --sensitivity_thresholds must be finite numbers (got {', '.join(map(str, bad))})")
        _unit("--threshold", self.threshold)
        for t in self.sensitivity_thresholds:
            _unit("--sensitivity_thresholds", t)
        if isinstance(self.bootstrap_resamples, bool) or not isinstance(self.bootstrap_resamples, int) or self.bootstrap_resamples < 0:
            raise ValueError(f"--bootstrap_resamples must be 0 (off) or more (got {self.bootstrap_resamples})")
        if self.bootstrap_resamples > MAX_RESAMPLES:
            raise ValueError(f"--bootstrap_resamples must be at most {MAX_RESAMPLES:,} (got {self.bootstrap_resamples:,})")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"--seed must be an integer from 0 to {MAX_SEED} (got {self.seed})")


@dataclass(frozen=True)
class ScoringConfig:
    """One run of ``evaluate_results.py``: what :func:`k9bench.scoring.config_from_argv` returns."""

    files: ScoringFiles
    """Mode, input, outputs, subset."""
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    """The embedding model (calculate, all)."""
    evaluation: EvalSettings = field(default_factory=EvalSettings)
    """The rule's threshold and the statistics (evaluate, all)."""
    argv: tuple = ()
    """The command line as given (recorded, secrets masked, in the artifacts' provenance)."""
    report: Any = None
    """``--mode report``: its :class:`k9bench.report.ReportSettings`."""
    verbose: int = 0
    """``-v`` count."""
    quiet: bool = False
    """``-q``."""
