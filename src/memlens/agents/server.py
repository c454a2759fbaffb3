"""`memlens mcp`: the Model Context Protocol server over stdio (the `mcp` SDK, memlens[mcp]).

The SDK's low-level server, so that the tools, their schemas and their errors are ours:
the tool list is built from the analysis commands (tools.py), a call goes through
dispatch.py in a worker thread (the event loop keeps answering pings and cancellations
while a large snapshot loads), and every answer is the command's JSON, bounded. The SDK's
stdio transport moves fd 1 away from the protocol while it serves, so nothing a library
prints can corrupt a message.
"""

from __future__ import annotations

from typing import Any

from memlens.agents.dispatch import Dispatcher, error_line
from memlens.agents.resources import RESOURCES
from memlens.errors import MemlensError

INSTRUCTIONS = """\
memlens reads PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot). Open a
snapshot with open_snapshot, then: summary (baseline, peak, end state, top sites) -> peak
(what is live at the peak, by call stack) -> at / diff / stages / categories / leaks /
fragmentation / oom for the question at hand; fleet compares ranks. Every answer is the
JSON of `memlens <command> --json` (resource memlens://docs/json-schema.md), cut to a
bounded size with a note when cut. Read memlens://docs/concepts.md before explaining the
figures to someone."""


def serve(dispatcher: Dispatcher) -> None:
    """Serve on stdin/stdout until the client closes them."""
    try:
        import anyio
        from mcp import types
        from mcp.server.lowlevel import Server
        from mcp.server.stdio import stdio_server
    except ImportError as exc:
        raise MemlensError(
            f"memlens mcp needs the MCP SDK ({exc.name} is missing): pip install 'memlens[mcp]'"
        ) from None
    import memlens

    tools = [
        types.Tool(
            name=t.name,
            description=t.description,
            input_schema=t.input_schema,
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        )
        for t in dispatcher.tools.values()
    ]
    resources = [
        types.Resource(uri=r.uri, name=r.name, description=r.description, mime_type="text/markdown")
        for r in RESOURCES
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        reply = await anyio.to_thread.run_sync(dispatcher.call, params.name, params.arguments)
        content: list[types.ContentBlock] = [types.TextContent(text=reply.text)]
        if reply.notes:
            content.append(types.TextContent(text="memlens: cut: " + "; ".join(reply.notes)))
        return types.CallToolResult(
            content=content,
            structured_content=reply.data if isinstance(reply.data, dict) else None,
            is_error=reply.error,
        )

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=resources)

    async def read_resource(
        ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        found = next((r for r in RESOURCES if r.uri == str(params.uri)), None)
        try:
            if found is None:
                raise MemlensError(f"no resource {params.uri}")
            text = found.text()
        except MemlensError as exc:
            text = error_line(exc)
        contents: list[types.TextResourceContents | types.BlobResourceContents] = [
            types.TextResourceContents(uri=str(params.uri), mime_type="text/markdown", text=text)
        ]
        return types.ReadResourceResult(contents=contents)

    server: Server[Any] = Server(
        "memlens",
        version=memlens.__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
