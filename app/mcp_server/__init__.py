"""The MCP server (Model Context Protocol): the task's plan, history and budget as tools, its
final summary and inheritance as resources; served at /mcp and over stdio (docs/mcp.md)."""
