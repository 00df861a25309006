"""GET / points to the documentation, which the service serves from its own package: the
pages load nothing from another host, so they work offline."""

import re
from pathlib import Path

import httpx

from tests.support.app import running_app
from tests.support.settings import fast_settings

ADMIN_KEY = "index-test-admin-key-0123"

ASSET = re.compile(r'(?:src|href)="([^"]+)"')
ASSET_URL = re.compile(r'(?:url|Url)\s*[:=]\s*["\']([^"\']+)["\']')


async def test_the_index_names_the_service_and_its_docs(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    assert response.status_code == 200
    index = response.json()
    assert index["service"] == "context-service"
    assert index["version"] == (await client.get("/openapi.json")).json()["info"]["version"]
    links = {name: index[name] for name in ("docs", "redoc", "openapi", "health")}
    assert links == {
        "docs": "/docs",
        "redoc": "/redoc",
        "openapi": "/openapi.json",
        "health": "/healthz",
    }
    for path in links.values():
        assert (await client.get(path)).status_code == 200, path


async def test_the_docs_pages_load_only_packaged_assets(client: httpx.AsyncClient) -> None:
    for page in ("/docs", "/redoc"):
        html = (await client.get(page)).text
        references = ASSET.findall(html) + ASSET_URL.findall(html)
        scripts = [ref for ref in references if ref.endswith(".js")]
        assert scripts, f"{page} loads no script"
        for ref in references:
            assert ref.startswith("/"), f"{page} loads {ref} from elsewhere"
            asset = await client.get(ref)
            assert asset.status_code == 200, ref
            assert asset.content, ref
        assert "http://" not in html
        assert "https://" not in html.replace("https://fastapi.tiangolo.com", "")


async def test_with_keys_the_index_answers_without_a_key_and_hides_the_docs(
    context_dir: Path,
) -> None:
    async with running_app(
        fast_settings(context_dir, auth={"admin_api_keys": [ADMIN_KEY]})
    ) as client:
        response = await client.get("/")
        assert response.status_code == 200
        index = response.json()
        assert index["docs"] is index["redoc"] is index["openapi"] is None
        assert index["health"] == "/healthz"


async def test_without_keys_the_settings_make_the_docs_public(context_dir: Path) -> None:
    assert fast_settings(context_dir).auth.docs_public
    assert not fast_settings(context_dir, auth={"admin_api_keys": [ADMIN_KEY]}).auth.docs_public
