"""A payload of ``GET /tasks/{uuid}/request`` as keyword arguments of an official SDK's
``create()``.

The payload is the HTTP API's request body. An SDK's ``create()`` takes a fixed set of keyword
arguments, which may lag behind the API (anthropic 2.14's ``Messages.create()`` has no
``temperature``, ``top_p`` or ``top_k``), so ``create(**payload)`` can raise TypeError. The keys
the installed SDK's ``create()`` does not take go into ``extra_body``, which the SDK merges into
the JSON it sends: the request on the wire is the payload, key for key. Which keys ``create()``
takes is read from its signature at run time, so a newer SDK gets them as arguments. The SDKs
are imported only here, when asked for: the client does not need them.
"""

import functools
import importlib
import inspect
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["SDK", "create_parameters", "sdk_kwargs"]

SDK = Literal["openai", "anthropic"]

# Where each SDK's create() is: (module, class).
_CREATE: dict[str, tuple[str, str]] = {
    "openai": ("openai.resources.chat.completions", "Completions"),
    "anthropic": ("anthropic.resources.messages", "Messages"),
}
# create()'s own options, not fields of the request: a payload key so named goes to extra_body.
_SDK_OPTIONS = frozenset({"self", "extra_headers", "extra_query", "extra_body", "timeout"})


def sdk_kwargs(payload: Mapping[str, Any], sdk: SDK) -> dict[str, Any]:
    """``payload`` split into what ``create()`` takes and an ``extra_body`` for the rest."""
    accepted = create_parameters(sdk)
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in payload.items():
        takes = key not in _SDK_OPTIONS and (accepted is None or key in accepted)
        (kwargs if takes else extra)[key] = value
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


@functools.cache
def create_parameters(sdk: SDK) -> frozenset[str] | None:
    """The request fields the installed SDK's ``create()`` takes by name (None: any keyword)."""
    module_name, class_name = _CREATE[sdk]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"keyword arguments for the {sdk} SDK need it installed (pip install {sdk})"
        ) from exc
    create = getattr(module, class_name).create
    parameters = inspect.signature(create).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in parameters if p.kind in named) - _SDK_OPTIONS
