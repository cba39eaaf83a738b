"""A small HTTP/1.1 client on asyncio streams: one connection per call.

Cancelling a call closes its connection at once (a long-poll claim is
abandoned, which the server reads as "not a refusal")."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

MAX_BODY = 64 << 20  # replies larger than this are an error, not memory


class TransportError(Exception):
    """No answer: the server could not be reached or the reply was cut off."""


async def request(
    base_url: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """Send one request and return the status and the body."""
    u = urlsplit(base_url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"fenceq: server URL {base_url!r} is not http:// or https://")
    tls = u.scheme == "https"
    port = u.port or (443 if tls else 80)
    prefix = u.path.rstrip("/")
    data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    host = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
    head = [f"{method} {prefix}{path} HTTP/1.1", f"Host: {host}", "Connection: close",
            "Accept: application/json", "User-Agent: fenceq-python/0.1"]
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    elif method in ("POST", "PUT"):
        head.append("Content-Length: 0")
    for k, v in (headers or {}).items():
        head.append(f"{k}: {v}")
    raw = ("\r\n".join(head) + "\r\n\r\n").encode() + data

    async def exchange() -> tuple[int, bytes]:
        ctx: ssl.SSLContext | None = None
        if tls:
            ctx = ssl_context or ssl.create_default_context()
        try:
            reader, writer = await asyncio.open_connection(u.hostname, port, ssl=ctx)
        except OSError as e:
            raise TransportError(f"fenceq: cannot reach {base_url}: {e}") from e
        try:
            writer.write(raw)
            await writer.drain()
            return await _read_reply(reader)
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            raise TransportError(f"fenceq: {method} {path} at {base_url}: no complete answer: {e}") from e
        finally:
            writer.close()

    try:
        return await asyncio.wait_for(exchange(), timeout)
    except TimeoutError as e:
        raise TransportError(f"fenceq: {method} {path} at {base_url}: no answer within {timeout:g}s") from e


async def _read_reply(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readuntil(b"\r\n")
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"not an HTTP reply: {status_line[:80]!r}")
    status = int(parts[1])
    length: int | None = None
    chunked = False
    while True:
        line = await reader.readuntil(b"\r\n")
        if line == b"\r\n":
            break
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if status in (204, 304) or 100 <= status < 200:
        return status, b""
    if chunked:
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                return status, bytes(body)
            if len(body) + size > MAX_BODY:
                raise ValueError("reply too large")
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    if length is not None:
        if length > MAX_BODY:
            raise ValueError("reply too large")
        return status, await reader.readexactly(length)
    return status, await reader.read(MAX_BODY)
