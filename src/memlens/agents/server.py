"""`memlens mcp`: the Model Context Protocol server over stdio (the `mcp` SDK, memlens[mcp]).

The SDK's low-level server, so that the tools, their schemas and their errors are ours:
the tool list is built from the analysis commands (tools.py), a call goes through
dispatch.py in its own thread (calls.py: the event loop keeps answering other calls, pings
and cancellations while a large snapshot loads; a cancelled call, or one over the time
limit, is stopped; at most `Limits.calls` run at once), and every answer is the command's
JSON, bounded. The SDK's
stdio transport moves fd 1 away from the protocol while it serves, so nothing a library
prints can corrupt a message.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from memlens.agents.calls import Call
from memlens.agents.dispatch import Dispatcher, Reply, error_line
from memlens.agents.resources import RESOURCES
from memlens.errors import MemlensError


@dataclass(frozen=True)
class Limits:
    calls: int = 4  # tool calls running at once; more wait for a slot
    seconds: float = 600.0  # a call still running after this is stopped, with an error line


INSTRUCTIONS = """\
memlens reads PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot). Open a
snapshot with open_snapshot, then: summary (baseline, peak, end state, top sites) -> peak
(what is live at the peak, by call stack) -> at / diff / stages / categories / leaks /
fragmentation / oom for the question at hand; fleet compares ranks. Every answer is the
JSON of `memlens <command> --json` (resource memlens://docs/json-schema.md), cut to a
bounded size with a note when cut. Read memlens://docs/concepts.md before explaining the
figures to someone."""


def _finished(name: str, call: Call[Reply]) -> Reply:
    """The reply of a call whose thread has ended."""
    if call.result is not None:
        return call.result
    failure = call.error if isinstance(call.error, Exception) else None
    return Reply(error_line(failure or MemlensError(f"{name}: the call ended")), error=True)


def _reporter(ctx: Any) -> Callable[[str], None] | None:
    """The call's progress lines as MCP progress notifications, when the client sent a
    progress token (notifications/progress: a count that grows, and the line as message).
    Called from the call's thread: each notification is handed to the server's loop."""
    meta = getattr(ctx, "meta", None) or {}
    token = (
        meta.get("progress_token", meta.get("progressToken")) if isinstance(meta, dict) else None
    )
    if token is None:
        token = getattr(meta, "progress_token", None)
    if token is None:
        return None
    loop = asyncio.get_running_loop()
    count = itertools.count(1)

    def report(line: str) -> None:
        notify = ctx.session.send_progress_notification(token, float(next(count)), message=line)
        asyncio.run_coroutine_threadsafe(notify, loop)

    return report


def serve(dispatcher: Dispatcher, limits: Limits | None = None) -> None:
    """Serve on stdin/stdout until the client closes them."""
    limits = limits or Limits()
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
            # a tool that may run a script or write files is not announced read-only
            annotations=types.ToolAnnotations(read_only_hint=t.read_only, open_world_hint=False),
        )
        for t in dispatcher.tools.values()
    ]
    resources = [
        types.Resource(uri=r.uri, name=r.name, description=r.description, mime_type="text/markdown")
        for r in RESOURCES
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    slots = anyio.CapacityLimiter(limits.calls)
    watchers = anyio.CapacityLimiter(limits.calls)  # one thread waits on each running call
    background: list[Any] = []  # the server's task group, once it runs

    async def watch(call: Call[Reply], ended: Any) -> None:
        """Wait for the call's thread to end, then free its slot (also when it was stopped
        and its reply went out long ago)."""
        try:
            await anyio.to_thread.run_sync(call.done.wait, abandon_on_cancel=True, limiter=watchers)
        finally:
            slots.release_on_behalf_of(call)
            ended.set()

    async def run_call(
        name: str, arguments: Any, progress: Callable[[str], None] | None = None
    ) -> Reply:
        call = Call(partial(dispatcher.call, name, arguments, progress), name=f"memlens-{name}")
        await slots.acquire_on_behalf_of(call)  # a wait an agent's cancellation ends
        ended = anyio.Event()
        try:
            call.start()
        finally:
            background[0].start_soon(watch, call, ended)
        try:
            with anyio.move_on_after(limits.seconds):
                await ended.wait()
        except BaseException:  # cancelled by the client (notifications/cancelled): stop it
            call.stop()
            raise
        if not ended.is_set():
            call.stop()
            return Reply(
                error_line(
                    MemlensError(
                        f"{name}: stopped after {limits.seconds:g} s, the server's limit "
                        "per call (memlens mcp --call-timeout)"
                    )
                ),
                error=True,
            )
        return _finished(name, call)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        reply = await run_call(params.name, params.arguments, _reporter(ctx))
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
        async with (
            stdio_server() as (read_stream, write_stream),
            anyio.create_task_group() as group,
        ):
            background.append(group)
            await server.run(read_stream, write_stream, server.create_initialization_options())
            group.cancel_scope.cancel()

    anyio.run(main)
