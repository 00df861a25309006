"""``context-service``: run the service and its maintenance on this machine (``serve``,
``migrate``, ``openapi``, ``cleanup``, ``repair``, ``mcp``), and look at a running one
(``tasks``, ``task``, ``jobs``, ``stats``)."""

import argparse
from importlib.metadata import version


def main(argv: list[str] | None = None) -> None:
    # Imported here: a summariser process the service starts runs the console script again
    # as its main module (multiprocessing's spawn), and needs none of the commands.
    from app.cli import local, remote
    from app.config import Settings
    from app.observability.logs import configure_logging

    settings = Settings()
    configure_logging(settings)
    parser = argparse.ArgumentParser(
        prog="context-service",
        description="Durable, compacted LLM conversation context for coding agents.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version('context-service')}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    local.add_commands(commands, settings)
    remote.add_commands(commands)
    args = parser.parse_args(argv)
    args.run(args, parser)
