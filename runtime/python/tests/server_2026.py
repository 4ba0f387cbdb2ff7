"""An MCP server on the `mcp` SDK that samples through a resolver
(`Resolve` returning `Sample`): under MCP 2026-07-28 the SDK sends the
sampling request as an `inputRequests` entry of an `InputRequiredResult`,
under earlier revisions as a `sampling/createMessage` request. Its tool
returns the result it got, as JSON."""

import warnings
from typing import Annotated

from mcp import types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Resolve, Sample

warnings.simplefilter("ignore")  # sampling is deprecated in 2026-07-28; this server uses it on purpose

server = MCPServer("python-sampler-2026")


def ask(prompt: str) -> Sample:
    return Sample(
        [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
        max_tokens=9000,
        include_context="allServers",
    )


@server.tool()
async def summarise(prompt: str, answer: Annotated[types.CreateMessageResult, Resolve(ask)]) -> dict:
    """Returns what the client's model answered to `prompt`."""
    return {"result": answer.model_dump(by_alias=True, exclude_none=True, mode="json")}


if __name__ == "__main__":
    server.run("stdio")
