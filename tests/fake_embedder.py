"""A stand-in for the embedding model in scoring tests that need no real model: deterministic
bag-of-words vectors, the sentence-transformers ``encode`` signature the scoring stage calls, and a
``load`` that replaces :func:`k9bench.scoring.embedding.load_embedding_model` (and counts its calls)."""

from __future__ import annotations

import hashlib

import numpy as np

from k9bench.scoring.embedding import EmbeddingRun

DIM = 64


class FakeEmbedder:
    """``encode(texts, ...)``: each word hashed into one of :data:`DIM` buckets, plus a constant
    component (so an empty text is not a zero vector), normalised."""

    def __init__(self):
        self.encoded: list[str] = []

    def encode(self, texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False,
               prompt_name=None):
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            self.encoded.append(text)
            out[row, 0] = 1.0
            for word in text.lower().replace(".", " ").split():
                out[row, 1 + int(hashlib.sha256(word.encode()).hexdigest(), 16) % (DIM - 1)] += 3.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class FakeLoader:
    """Replaces ``k9bench.scoring.embedding.load_embedding_model``; ``calls`` counts the loads."""

    def __init__(self):
        self.calls = 0
        self.model = FakeEmbedder()

    def __call__(self, settings, **kwargs):
        self.calls += 1
        name = getattr(settings, "embedding_model", settings)
        return self.model, EmbeddingRun(model=str(name), device="cpu", dtype="float32", attention=None)
