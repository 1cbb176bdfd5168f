from geoviz.cli import main

raise SystemExit(main())
