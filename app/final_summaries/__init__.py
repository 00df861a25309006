"""Final summaries: what a finished run leaves behind for the next one."""
