"""``msprof-lsp mcp``: the MCP server for coding agents (docs/agents.md). Only this package
imports the ``mcp`` SDK (the optional extra ``msprof-lsp[mcp]``)."""
