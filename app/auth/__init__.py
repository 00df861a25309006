"""Bearer API keys (SPEC §12): who is calling, what role, which tenants."""
