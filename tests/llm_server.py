"""A chat-completions server on loopback that answers from a script, for the LLM proposer's tests.

It speaks just enough HTTP/1.1 (keep-alive, Content-Length bodies) for httpx, so a test can make it
answer well, answer garbage, rate-limit with Retry-After, fail with 5xx, stall past any deadline or
drop the connection mid-request: the failures a real provider has, on demand.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]  # lower-case names
    body: dict[str, Any]
    received_at: float  # time.monotonic()

    @property
    def prompt(self) -> str:
        """The user message: the prompt codevolve rendered."""
        return str(self.body["messages"][-1]["content"])


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = None  # JSON-encoded unless a str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stall:
    seconds: float  # hold the request this long, then answer with ``then``
    then: Reply | None = None


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering."""


Action = Reply | Stall | Drop
Script = Callable[[Request], Action | Awaitable[Action]]


def completion(text: str, *, tokens_in: int = 100, tokens_out: int = 50) -> Reply:
    return Reply(
        body={
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },
        }
    )


class ChatServer:
    """``async with serve(script) as server``: ``server.url`` is the ``/v1`` root."""

    def __init__(self, script: Script) -> None:
        self._script = script
        self.requests: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.url = ""
        self.closing = asyncio.Event()
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            while await self._one(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._handlers.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        path = head[0].split(" ")[1]
        headers = {}
        for line in head[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        request = Request(path, headers, json.loads(raw or b"{}"), time.monotonic())
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            action = self._script(request)
            if not isinstance(action, Reply | Stall | Drop):
                action = await action
            if isinstance(action, Stall):
                with contextlib.suppress(TimeoutError):  # a stall ends early when serving ends
                    await asyncio.wait_for(self.closing.wait(), action.seconds)
                action = action.then if not self.closing.is_set() and action.then else Drop()
            if isinstance(action, Drop):
                return False
        finally:
            self.in_flight -= 1
        body = action.body if isinstance(action.body, str) else json.dumps(action.body)
        payload = body.encode()
        lines = [f"HTTP/1.1 {action.status} X", f"Content-Length: {len(payload)}"]
        lines += ["Content-Type: application/json", "Connection: keep-alive"]
        lines += [f"{name}: {value}" for name, value in action.headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        return True


@contextlib.asynccontextmanager
async def serve(script: Script) -> AsyncIterator[ChatServer]:
    server = ChatServer(script)
    listener = await asyncio.start_server(server._handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    server.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield server
    finally:
        server.closing.set()
        listener.close()
        for writer in list(server._writers):
            writer.close()  # idle keep-alive connections read EOF and end
        await asyncio.gather(*server._handlers)
        await listener.wait_closed()
