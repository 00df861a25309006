"""Messages: appending to a context, its history, and the committed context snapshot."""
