"""An MCP server written with the official Python SDK that samples from
inside a tool call with ``ctx.session.create_message``.

Its ``summarise`` tool sends one sampling request and returns, as structured
content, exactly what came back: the result (with any ``_meta`` the proxy
added) or the JSON-RPC error (code, message, data).
"""

import warnings

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

warnings.simplefilter("ignore")  # sampling is deprecated in 2026-07-28; this server uses it on purpose

server = MCPServer("python-sampler")


@server.tool()
async def summarise(prompt: str, include_context: str = "none", max_tokens: int = 500, ctx: Context = None) -> dict:
    """Asks the client's model to summarise `prompt`."""
    try:
        result = await ctx.session.create_message(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
            max_tokens=max_tokens,
            system_prompt="You write release notes.",
            include_context=include_context,
        )
    except MCPError as error:
        return {"error": {"code": error.error.code, "message": error.error.message, "data": error.error.data}}
    return {"result": result.model_dump(by_alias=True, exclude_none=True, mode="json")}


if __name__ == "__main__":
    server.run("stdio")
