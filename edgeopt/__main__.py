from edgeopt.cli import main

raise SystemExit(main())
