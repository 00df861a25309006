"""The one place where exceptions become HTTP answers, all in the shape of ErrorResponse."""

import logging
import re
from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.models import Schema
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException
from starlette.routing import compile_path

from app.errors import AppError, ErrorCode, ErrorResponse, RequestInvalid, error_payload
from app.storage.failures import storage_failure

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.BODY_TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
}

# For the routers' `responses=`: each endpoint documents the error shape it can answer with.
# By reference, not as a `model`: FastAPI builds a validator for every response model of every
# route when an app first routes to it, nine per route here, only ever used for the document
# (about 40% of the cost of a route's first request). The schema itself is added once to the
# document's components (:func:`install_error_schema`).
ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorResponse"}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"description": description, "content": {"application/json": {"schema": ERROR_SCHEMA}}}
    for status, description in {
        401: "No API key, or an unknown one (when API_KEYS is set)",
        403: "The key's role or tenants do not allow this",
        404: "Unknown task",
        409: "The task's state does not allow this",
        413: "Too large",
        415: "The body is not declared as JSON (Content-Type: application/json)",
        422: "Invalid input",
        503: "The store cannot be written (read-only, no permission)",
        507: "The disk of CONTEXT_DIR or the database is full: nothing was acknowledged",
    }.items()
}


def install_error_schema(app: FastAPI) -> None:
    """Put ErrorResponse and the schemas it refers to in the app's OpenAPI components."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()  # kept by the app, as app.openapi_schema
            error = ErrorResponse.model_json_schema(
                ref_template="#/components/schemas/{model}", mode="serialization"
            )
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            added = {**error.pop("$defs", {}), "ErrorResponse": error}
            # Through FastAPI's model of a schema, as the rest of the document went: its fields'
            # order is the document's order of keys.
            schemas.update(
                (name, jsonable_encoder(Schema(**schema), by_alias=True, exclude_none=True))
                for name, schema in added.items()
            )
            document["components"]["schemas"] = dict(sorted(schemas.items()))
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def error_response(
    payload: dict[str, Any], status: int, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """An error answer. A 5xx also ends the connection, and says so: uvicorn drops the
    connection of an app that raised, and a client told so in advance never sends its next
    request into a closed socket (where it could not know whether a POST was applied)."""
    if status >= 500:
        headers = {**(headers or {}), "Connection": "close"}
    return JSONResponse(payload, status, headers=headers)


def _app_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)
    if exc.status_code >= 500:
        log.error("%s: %s", exc.code, exc.message)
    return error_response(
        error_payload(exc.code, exc.message, exc.details), exc.status_code, headers=exc.headers
    )


# pydantic's words for "not an object", which read oddly about a whole body.
_NOT_AN_OBJECT = frozenset({"model_attributes_type", "dict_type", "model_type"})


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {**e, "msg": "the body must be a JSON object"}
        if tuple(e["loc"]) == ("body",) and e["type"] in _NOT_AN_OBJECT
        else e
        for e in exc.errors()
    ]
    invalid_json = any(e["type"] == "json_invalid" for e in errors)
    code = ErrorCode.INVALID_JSON if invalid_json else ErrorCode.VALIDATION_ERROR
    return _app_error(request, RequestInvalid(errors, code=code))


def _allowed_methods(request: Request) -> str:
    """Every method the API serves at this path: Starlette's 405 names only the first matching
    route's (OPTIONS /tasks: "POST", not "GET, POST"). The table comes from the app's own
    OpenAPI paths, built at the first 405."""
    table: list[tuple[re.Pattern[str], set[str]]] | None = getattr(
        request.app.state, "allowed_methods", None
    )
    if table is None:
        table = [
            (compile_path(path)[0], {method.upper() for method in operations})
            for path, operations in request.app.openapi()["paths"].items()
        ]
        request.app.state.allowed_methods = table
    methods = set().union(*(found for pattern, found in table if pattern.match(request.url.path)))
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        headers = {"Allow": _allowed_methods(request)}
        message = f"{request.method} is not allowed on this path"
        return JSONResponse(
            error_payload(ErrorCode.METHOD_NOT_ALLOWED, message), 405, headers=headers
        )
    if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
        # FastAPI's generic 400 for a body it could not decode: malformed JSON like any other.
        return JSONResponse(
            error_payload(ErrorCode.INVALID_JSON, "the body is not UTF-8 JSON"), 422
        )
    code = _HTTP_CODES.get(exc.status_code, ErrorCode.HTTP_ERROR)
    return error_response(error_payload(code, str(exc.detail)), exc.status_code, exc.headers)


def _storage_error(request: Request, exc: Exception) -> JSONResponse:
    """A write the disk refused (files or database): 507 when it is full, 503 when it cannot be
    written (nothing was acknowledged; the files are repaired on the next access); any other
    failure of the store is unexpected."""
    failure = storage_failure(exc)
    if failure is None:
        return _unexpected_error(request, exc)
    log.error("storage: %s (%s)", failure.details["reason"], exc)
    return error_response(
        error_payload(failure.code, failure.message, failure.details), failure.status_code
    )


def _corrupt_record(_: Request, exc: Exception) -> JSONResponse:
    """A committed line that does not parse: the file was damaged under the service (recovery
    repairs torn tails, not bytes changed in the middle). Say so; never guess its content."""
    log.error("a stored record does not parse: %s", exc)
    message = "a stored record of this task does not parse: its file is damaged (see the logs)"
    return error_response(error_payload(ErrorCode.CORRUPT_RECORD, message), 500)


def _unexpected_error(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return error_response(error_payload(ErrorCode.INTERNAL_ERROR, "internal server error"), 500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(OSError, _storage_error)
    app.add_exception_handler(DBAPIError, _storage_error)
    app.add_exception_handler(orjson.JSONDecodeError, _corrupt_record)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
