"""``python -m k9bench.tiny_model``: see :mod:`k9bench.tiny_model`."""

from k9bench.tiny_model import main

if __name__ == "__main__":
    raise SystemExit(main())
