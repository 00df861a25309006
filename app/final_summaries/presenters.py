"""A task's final summary, as API answers."""

from app.final_summaries.schemas import FinalSummaryOut
from app.final_summaries.service import FinalSummary
from app.jobs.schemas import JobOut


def final_summary_out(task_uuid: str, found: FinalSummary) -> FinalSummaryOut:
    job = found.job
    summarizer = (job.result or {}).get("summarizer") if job is not None else None
    return FinalSummaryOut(
        uuid=task_uuid,
        status=found.status,
        summary=found.text,
        summarizer=summarizer if found.text is not None else None,
        job=JobOut.model_validate(job) if job is not None else None,
    )
