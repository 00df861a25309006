"""What every results file records about the run: the machine and the time."""

import platform
import time
from typing import Any

import psutil


def run_facts() -> dict[str, Any]:
    return {
        "machine": {
            "cpus": psutil.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
