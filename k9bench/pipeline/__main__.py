"""``python -m k9bench.pipeline``: the launcher (see :mod:`k9bench.pipeline`)."""

from k9bench.pipeline import main

raise SystemExit(main())
