"""memlens for coding agents: the MCP server (`memlens mcp`), the bundled skill (`memlens skill`)
and the capabilities listing (`memlens capabilities`).

At the cli level: it may use every layer below, but it never imports `memlens.cli` (that
would tie the two packages both ways); the commands in `cli/` hand it what it needs (the
declared analysis commands, the click commands to list). The MCP SDK is imported only by
`server.py`, and only when `memlens mcp` runs.
"""
