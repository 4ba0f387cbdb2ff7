"""``server.py``'s MCP server over Streamable HTTP, for ``mcpc gateway``.

    python http_server.py

Binds 127.0.0.1 on a port the system chooses, prints ``port N`` on its
first line of standard output, and serves the endpoint ``/mcp`` (stateful:
the SDK assigns each client an ``Mcp-Session-Id``) until it is killed.
"""

import asyncio
import socket
import sys
import warnings

import uvicorn

from server import server

warnings.simplefilter("ignore")


async def main() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    print(f"port {listener.getsockname()[1]}", flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning")
    await uvicorn.Server(config).serve(sockets=[listener])


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
