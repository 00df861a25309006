"""A task's key: the source, repository and issue (or pull request) it works on. Runs of the
same key follow one another: a new one may inherit what the last one left."""

from pydantic import BaseModel, ConfigDict, Field

from app.db.base import DBText


class TaskKey(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_source: DBText = Field(min_length=1, max_length=64, examples=["github"])
    owner: DBText = Field(min_length=1, max_length=255, examples=["notfolder"])
    repo: DBText = Field(min_length=1, max_length=255, examples=["coding_agent"])
    task_type: DBText = Field(min_length=1, max_length=64, examples=["issue"])
    task_id: DBText = Field(min_length=1, max_length=255, examples=["27"])
