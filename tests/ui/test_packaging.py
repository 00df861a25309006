"""The ops page's templates and static files are package data: an installed service (a wheel,
the Docker image) serves the same pages as a checkout."""

import tomllib

from tests.support.paths import REPO

UI = REPO / "app" / "ui"


def test_every_template_and_asset_is_package_data() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["app.ui"]
    files = [
        p for folder in ("templates", "static") for p in (UI / folder).rglob("*") if p.is_file()
    ]
    assert files
    for path in files:
        relative = path.relative_to(UI)
        assert any(relative.match(pattern) for pattern in patterns), relative
