"""The client's types name the fields of the service's schemas (openapi.yaml, itself checked
against the app): a field added to or removed from an answer fails here until the client
follows."""

import functools
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import pytest
import yaml

from context_client import types
from tests.support.paths import REPO

# client type -> the schema of openapi.yaml it mirrors
MIRRORS = {
    "AppendResult": "AppendResult",
    "Calibration": "Calibration",
    "CallTotals": "CallTotals",
    "Candidate": "Candidate",
    "CandidatePage": "CandidatePage",
    "ChatMessage": "MessageIn",
    "RunningSiblings": "RunningSiblings",
    "CompactionChoice": "CompactionChoice",
    "CompactionOptions": "CompactionOptionsOut",
    "CompactionResult": "CompactionResult",
    "ContextEntry": "ContextEntry",
    "ContextSummary": "ContextSummary",
    "ContextView": "ContextView",
    "Failure": "Failure",
    "FinalSummary": "FinalSummaryOut",
    "FunctionCall": "FunctionCall",
    "FunctionDefinition": "FunctionDefinition",
    "Inheritance": "InheritanceOut",
    "InheritanceRecord": "InheritanceRecord",
    "Job": "JobOut",
    "JobPage": "JobPage",
    "MessagePage": "MessagePage",
    "MessageText": "MessageText",
    "MessageRecord": "MessageRecord",
    "PlanEntry": "PlanEntry",
    "PlanItem": "PlanItem",
    "PlanItemIn": "PlanItemIn",
    "PlanPage": "PlanPage",
    "ProtectedEntry": "ProtectedEntry",
    "RewindResult": "RewindResult",
    "RunningTask": "RunningTask",
    "RunningTasks": "RunningTasks",
    "Stats": "StatsOut",
    "StatsFilters": "StatsFilters",
    "StatusCounts": "StatusCounts",
    "SummaryPage": "SummaryPage",
    "SummaryRecord": "SummaryRecord",
    "Task": "TaskOut",
    "TaskCreated": "TaskCreated",
    "TaskKey": "TaskKey",
    "TaskPage": "TaskPage",
    "TaskStatistics": "TaskStatistics",
    "Thread": "ThreadOut",
    "TokenTotals": "TokenTotals",
    "TokenUsage": "TokenUsage",
    "ToolCall": "ToolCall",
    "ToolDefinition": "ToolDefinition",
    "ToolRecord": "ToolRecord",
    "ToolRecordPage": "ToolRecordPage",
    "UserCounts": "UserCounts",
}


@functools.cache
def _schemas() -> dict[str, Any]:
    document = yaml.safe_load((REPO / "openapi.yaml").read_text())
    schemas: dict[str, Any] = document["components"]["schemas"]
    return schemas


def test_every_type_mirrors_a_schema() -> None:
    typed = {name for name in vars(types) if is_typeddict(getattr(types, name))}
    assert typed == set(MIRRORS)


@pytest.mark.parametrize(("name", "schema"), sorted(MIRRORS.items()))
def test_a_type_has_the_fields_of_its_schema(name: str, schema: str) -> None:
    """The same field names; a schema that allows extra fields (messages, summaries, tool
    records as stored) may have fewer than the type, which names the usual extras."""
    described = _schemas()[schema]
    fields = set(described["properties"])
    declared = set(get_type_hints(getattr(types, name)))
    if described.get("additionalProperties"):
        assert fields <= declared, sorted(fields - declared)
    else:
        assert declared == fields, (sorted(declared - fields), sorted(fields - declared))


@pytest.mark.parametrize("name", ["TaskStatus", "PayloadFormat", "JobStatus", "PlanStatus"])
def test_the_enumerations_are_the_services(name: str) -> None:
    where = {
        "TaskStatus": ("TaskOut", "status"),
        "PayloadFormat": ("ContextView", "format"),
        "JobStatus": ("JobOut", "status"),
        "PlanStatus": ("PlanItem", "status"),
    }
    schema, field = where[name]
    allowed = _schemas()[schema]["properties"][field]
    values = allowed.get("enum") or _schemas()[allowed["$ref"].rsplit("/", 1)[1]]["enum"]
    alias = getattr(types, name)
    assert get_origin(alias) is not None
    assert set(get_args(alias)) == set(values)
