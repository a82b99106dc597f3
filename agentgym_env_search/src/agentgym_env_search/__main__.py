from agentgym_env_search.cli import main

raise SystemExit(main())
