"""Request limits uvicorn and starlette do not enforce: body size and the time to receive it.

A 50 MB body would otherwise be read whole into memory, and a client sending one byte every two
seconds would hold a worker forever. The body is refused (413) from its Content-Length before any
of it is read, or as soon as the bytes read pass the limit.
"""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect, Request

from .config import Limits
from .errors import BadRequest, PayloadTooLarge, RequestTimeout


async def read_body(request: Request, limits: Limits) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest("The Content-Length header is not a number.")
        if int(declared) > limits.max_body_bytes:
            raise PayloadTooLarge(_too_large(int(declared), limits))
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.receive_timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise PayloadTooLarge(_too_large(size, limits))
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(
            f"The request body was not received within {limits.receive_timeout:g} s "
            f"({size} bytes arrived). Send the whole body promptly."
        ) from None
    except ClientDisconnect:
        raise BadRequest("The client disconnected before the request body was complete.") from None
    return b"".join(chunks)


def _too_large(size: int, limits: Limits) -> str:
    return (
        f"The request body is {size:,} bytes or more; this proxy accepts at most {limits.max_body_bytes:,} bytes "
        "(limits.max_body_bytes). Shorten the request or raise the limit."
    )
