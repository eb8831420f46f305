"""``python -m specmon`` is the ``specmon`` command."""

from specmon.cli.main import main

raise SystemExit(main())
