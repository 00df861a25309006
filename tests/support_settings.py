"""Settings for tests: a helper's defaults with a test's own values over them."""

from typing import Any


def layered(*layers: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for Settings, each layer over the ones before; a group given as a dict
    (``job={"poll_s": 0.05}``) is merged field by field, so a test changes only what it names."""
    values: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            below = values.get(name)
            both = isinstance(below, dict) and isinstance(value, dict)
            values[name] = below | value if both else value
    return values
