"""Token counting: counters behind one small protocol, and what a message's text costs."""
