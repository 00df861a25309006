"""``context-service serve|migrate``."""

import argparse
import asyncio

import uvicorn
import yaml

from app.config import Settings
from app.db.engine import open_database
from app.lifespan import prepare_storage
from app.storage.layout import Layout


def openapi_yaml() -> str:
    """The app's OpenAPI document, as committed in openapi.yaml."""
    from app.main import create_app

    return yaml.safe_dump(create_app().openapi(), sort_keys=False, allow_unicode=True, width=100)


async def _migrate(settings: Settings) -> None:
    db = open_database(settings.effective_database_url)
    try:
        await prepare_storage(settings, db, Layout(settings.context_dir.resolve()))
    finally:
        await db.dispose()


def main(argv: list[str] | None = None) -> None:
    settings = Settings()
    parser = argparse.ArgumentParser(prog="context-service")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default=settings.host)
    serve.add_argument("--port", type=int, default=settings.port)
    serve.add_argument("--workers", type=int, default=1)
    commands.add_parser("migrate", help="create or upgrade the database, reconcile CONTEXT_DIR")
    commands.add_parser("openapi", help="print the OpenAPI document as YAML")
    args = parser.parse_args(argv)
    if args.command == "openapi":
        print(openapi_yaml(), end="")
    elif args.command == "migrate":
        asyncio.run(_migrate(settings))
        print(f"database at head; {settings.context_dir.resolve()} reconciled")
    else:
        uvicorn.run("app.main:app", host=args.host, port=args.port, workers=args.workers)
