"""``python -m codevolve.services.cli``: the ``codevolve`` command."""

from codevolve.services.cli import main

raise SystemExit(main())
