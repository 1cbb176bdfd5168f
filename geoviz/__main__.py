"""``python -m geoviz``: the command line (:func:`geoviz.cli.main`)."""

import sys

try:
    from geoviz.cli import main
except KeyboardInterrupt:  # Ctrl-C while the CLI's modules load: quiet, as during a command
    print("interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
