"""openapi.yaml is generated from the app (`make openapi`) and must not go stale."""

import orjson
import yaml

from app.cli.runs import openapi_yaml
from app.main import create_app
from tests.support.paths import REPO


def test_openapi_yaml_is_current() -> None:
    committed = yaml.safe_load((REPO / "openapi.yaml").read_text())
    generated = orjson.loads(orjson.dumps(create_app().openapi()))
    assert committed == generated, "openapi.yaml is stale: run `make openapi`"
    assert openapi_yaml() == (REPO / "openapi.yaml").read_text()


def test_every_operation_documents_the_error_shape() -> None:
    spec = create_app().openapi()
    for path, operations in spec["paths"].items():
        if path in ("/", "/healthz", "/readyz", "/metrics"):
            continue
        for method, operation in operations.items():
            errors = {code for code in operation["responses"] if code.startswith("4")}
            assert {"404", "422"} <= errors, f"{method.upper()} {path} documents {errors}"
