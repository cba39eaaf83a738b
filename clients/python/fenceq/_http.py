"""A small HTTP/1.1 client on asyncio streams with persistent connections.

A call takes an idle connection to the server (or opens one) and puts it
back when the reply was read in full: one connection per concurrent
caller, kept alive between calls. A reused connection that the server had
closed meanwhile (an idle timeout, a restart) is replaced by a fresh one
and the call sent again, as long as nothing of a reply came back.
Cancelling a call closes its connection at once (a long-poll claim is
abandoned, which the server reads as "not a refusal")."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

MAX_BODY = 64 << 20  # replies larger than this are an error, not memory
MAX_IDLE = 64  # idle connections kept per server

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class TransportError(Exception):
    """No answer: the server could not be reached or the reply was cut off."""


class _Closed(Exception):
    """A reused connection was closed by the server before any reply."""


class Connections:
    """Persistent connections to the server at base_url."""

    def __init__(self, base_url: str, ssl_context: ssl.SSLContext | None = None) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"fenceq: server URL {base_url!r} is not http:// or https://")
        self.base_url = base_url
        self._tls = u.scheme == "https"
        self._hostname = u.hostname
        self._port = u.port or (443 if self._tls else 80)
        self._prefix = u.path.rstrip("/")
        self._host = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
        self._ssl = (ssl_context or ssl.create_default_context()) if self._tls else None
        self._idle: list[_Conn] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def close(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for _, w in idle:
            w.close()

    def _take(self) -> _Conn | None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # connections belong to the loop that opened them
            self._idle, self._loop = [], loop
        while self._idle:
            r, w = self._idle.pop()
            if not w.is_closing() and not r.at_eof():
                return r, w
            w.close()
        return None

    async def _open(self) -> _Conn:
        try:
            return await asyncio.open_connection(self._hostname, self._port, ssl=self._ssl)
        except (OSError, ssl.SSLError) as e:
            raise TransportError(f"fenceq: cannot reach {self.base_url}: {e}") from e

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, bytes]:
        """Send one request and return the status and the body."""
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        head = [f"{method} {self._prefix}{path} HTTP/1.1", f"Host: {self._host}",
                "Accept: application/json", "User-Agent: fenceq-python/0.1"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
        elif method in ("POST", "PUT"):
            head.append("Content-Length: 0")
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}")
        raw = ("\r\n".join(head) + "\r\n\r\n").encode() + data

        async def exchange() -> tuple[int, bytes]:
            while True:
                conn = self._take()
                reused = conn is not None
                if conn is None:
                    conn = await self._open()
                reader, writer = conn
                keep = False
                try:
                    status, reply, keep = await _send(reader, writer, raw, reused)
                    return status, reply
                except _Closed:
                    continue  # a fresh connection; nothing of the call was answered
                except (OSError, asyncio.IncompleteReadError, ValueError, ssl.SSLError) as e:
                    raise TransportError(f"fenceq: {method} {path} at {self.base_url}: no complete answer: {e}") from e
                finally:
                    if keep and len(self._idle) < MAX_IDLE:
                        self._idle.append(conn)
                    else:
                        writer.close()

        try:
            return await asyncio.wait_for(exchange(), timeout)
        except TimeoutError as e:
            raise TransportError(f"fenceq: {method} {path} at {self.base_url}: no answer within {timeout:g}s") from e


async def _send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes,
                reused: bool) -> tuple[int, bytes, bool]:
    try:
        writer.write(raw)
        await writer.drain()
        status_line = await reader.readuntil(b"\r\n")
    except asyncio.IncompleteReadError as e:
        if reused and not e.partial:
            raise _Closed() from e
        raise
    except (ConnectionResetError, BrokenPipeError) as e:
        if reused:
            raise _Closed() from e
        raise
    return await _read_reply(reader, status_line)


async def _read_reply(reader: asyncio.StreamReader, status_line: bytes) -> tuple[int, bytes, bool]:
    """The reply after its status line: status, body, and whether the
    connection may carry another call."""
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"not an HTTP reply: {status_line[:80]!r}")
    status = int(parts[1])
    keep = parts[0] == "HTTP/1.1"
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
        elif name == "connection" and "close" in value.lower():
            keep = False
    if status in (204, 304) or 100 <= status < 200:
        return status, b"", keep
    if chunked:
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                return status, bytes(body), keep
            if len(body) + size > MAX_BODY:
                raise ValueError("reply too large")
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    if length is not None:
        if length > MAX_BODY:
            raise ValueError("reply too large")
        return status, await reader.readexactly(length), keep
    return status, await reader.read(MAX_BODY), False
