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


def entry() -> None:
    """The process's entry point (`rlvr`, `python -m rlvr_cli`): `main`, and a process of a run of
    several ends without the interpreter's teardown (`train/distributed.py` `leave`)."""
    try:
        main()
    except SystemExit as done:
        distributed = sys.modules.get("rlvr_cli.train.distributed")
        if distributed is not None:
            distributed.leave(done.code)
        raise


if __name__ == "__main__":
    entry()
