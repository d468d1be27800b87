"""`python -m sm120kit.cli TASK ...`: the `sm120kit` command (sm120kit/cli/main.py)."""

from sm120kit.cli.main import main

if __name__ == "__main__":
    main()
