"""An asyncio application (FastAPI) that uses halo_actors through its HTTP front.

The runtime is trio; this app is asyncio. They meet over HTTP: the app asks a
running ``python -m halo_actors serve`` (its URL and a token from the
environment) and reads the answer from the SSE stream.

    export HALO_ACTORS_URL=http://127.0.0.1:9527 HALO_ACTORS_TOKEN=hat_...
    uvicorn examples.fastapi_app:app --port 8000
    curl -d '{"question": "count to 3"}' -H 'content-type: application/json' \\
        http://127.0.0.1:8000/ask
"""

from __future__ import annotations

import json
import os

import httpx
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

app = FastAPI(title="asks a halo_actors agent")


class Question(BaseModel):
    question: str
    session_id: str | None = None


class Answer(BaseModel):
    session_id: str
    answer: str
    tools: list[str]


def _client() -> httpx.AsyncClient:
    url = os.environ.get("HALO_ACTORS_URL", "http://127.0.0.1:9527")
    token = os.environ.get("HALO_ACTORS_TOKEN", "")
    return httpx.AsyncClient(base_url=url, headers={"x-token": token}, timeout=60)


@app.post("/ask")
async def ask(question: Question) -> Answer:
    """Send the question to a session and collect its streamed answer."""
    body: dict[str, str] = {"message": question.question}
    if question.session_id:
        body["sessionId"] = question.session_id
    session, text, tools = "", [], []
    async with _client() as client, client.stream("POST", "/api/web/chat", json=body) as resp:
        if resp.status_code != 200:
            detail = json.loads(await resp.aread()).get("error", "the agent server refused")
            raise HTTPException(status_code=502, detail=detail)
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            frame = json.loads(line.removeprefix("data:"))
            match frame["type"]:
                case "session":
                    session = frame["sessionId"]
                case "stream":
                    text.append(frame["text"])
                case "tool_call":
                    tools.append(frame["toolName"])
                case "error":
                    raise HTTPException(status_code=502, detail=frame.get("error", "error"))
    return Answer(session_id=session, answer="".join(text), tools=tools)
