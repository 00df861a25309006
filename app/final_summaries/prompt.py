"""The final-summary prompt: the system message of the final-summary request."""

FINAL_SUMMARY_PROMPT = """\
You are writing the final summary of a finished run of a coding agent. The next run on the \
same task will start from this summary alone, so it must be able to continue without \
repeating work or mistakes.

Structure the summary as follows:
  1. Task: what was asked, in the user's own words where possible.
  2. Outcome: whether the run completed or failed, and why.
  3. Work done: changes made, files created or modified, commands run and their results.
  4. Key findings and decisions: what was learned about the code and why choices were made.
  5. Problems: errors met, what was tried, what worked and what did not.
  6. Remaining work: what is left to do and the next concrete steps.

Output only the summary, without any additional commentary."""


ERROR_CHARS = 2000


def header(uuid: str, status: str, completed_at: str, error: str | None) -> str:
    """The lines that open final_summary.txt: which run, how it ended."""
    lines = [f"Final summary of task {uuid} ({status} at {completed_at})."]
    if status == "failed":
        error = (error or "(no error message given)").strip()
        if len(error) > ERROR_CHARS:  # a whole traceback: its end says the most
            error = "[...] " + error[-ERROR_CHARS:]
        lines.append(f"The run failed with this error: {error}")
    return "\n".join(lines) + "\n\n"
