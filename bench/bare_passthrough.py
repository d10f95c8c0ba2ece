"""The reference the proxy is measured against: a bare FastAPI + httpx passthrough, nothing else.

    python bench/bare_passthrough.py PORT UPSTREAM_BASE_URL
"""

from __future__ import annotations

import sys

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

UPSTREAM = sys.argv[2].rstrip("/")
app = FastAPI()
client = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200))


@app.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    body = await request.body()
    upstream = await client.send(client.build_request("POST", UPSTREAM + "/chat/completions", content=body,
                                                      headers={"content-type": "application/json"}), stream=True)
    if b'"stream":true' in body.replace(b" ", b""):
        async def relay():  # type: ignore[no-untyped-def]
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()

        return StreamingResponse(relay(), media_type="text/event-stream")
    content = await upstream.aread()
    await upstream.aclose()
    return Response(content, status_code=upstream.status_code, media_type="application/json")


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", access_log=False)
