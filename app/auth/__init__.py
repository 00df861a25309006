"""Bearer API keys: who is calling, what role, which tenants, and which tasks they may see."""
