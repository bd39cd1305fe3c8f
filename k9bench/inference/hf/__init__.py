"""``--backend hf``: transformers, local weights. :mod:`.backend` is the backend (batch 1 ``generate``, the reference's
path, or batched ``generate`` across videos), :mod:`.load` how it loads a checkpoint, :mod:`.settings` its flags."""
