"""The reference hop: the least a Python reverse proxy can do (Starlette + aiohttp client).

python -m bench.passthrough --upstream http://127.0.0.1:PORT/v1 --port P
"""

import argparse
import contextlib

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

args = argparse.ArgumentParser()
args.add_argument("--upstream", required=True)
args.add_argument("--port", type=int, required=True)
opts = args.parse_args()
session: aiohttp.ClientSession


@contextlib.asynccontextmanager
async def lifespan(app):  # type: ignore[no-untyped-def]
    global session
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)
    yield
    await session.close()


async def chat(request: Request) -> Response:
    body = await request.body()
    headers = {"content-type": "application/json", "authorization": request.headers.get("authorization", "")}
    upstream = await session.post(opts.upstream + "/chat/completions", data=body, headers=headers)
    ctype = upstream.headers.get("content-type", "application/json")
    if ctype.startswith("text/event-stream"):

        async def relay():  # type: ignore[no-untyped-def]
            try:
                async for chunk in upstream.content.iter_any():
                    yield chunk
            finally:
                upstream.release()

        return StreamingResponse(relay(), status_code=upstream.status, media_type=ctype)
    data = await upstream.read()
    upstream.release()
    return Response(data, status_code=upstream.status, media_type=ctype)


async def health(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


app = Starlette(
    routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/healthz", health)], lifespan=lifespan
)
uvicorn.run(app, host="127.0.0.1", port=opts.port, log_level="warning", access_log=False)
