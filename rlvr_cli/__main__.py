"""Entry point of the `rlvr` command.

`rlvr validate` runs as a pre-commit hook on every commit, so it is dispatched before the
typer app (and its imports) is loaded; every other command goes through `cli.app`.
"""

import os
import sys


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "validate":
        # pydantic plugins (an entry-point scan) have no role in checking a contract
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
        from rlvr_cli.commands.validate import main as validate_main

        sys.exit(validate_main(sys.argv[2:]))
    from rlvr_cli.cli import app

    app(prog_name="rlvr")


if __name__ == "__main__":
    main()
