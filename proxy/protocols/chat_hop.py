"""How a wire is served by a hop that speaks only chat completions (a litellm route).

The hop hands litellm `Wire.chat_request(body, stream)` (the wire's upstream body as a
chat-completions request; None: the wire cannot be served so, and the hop refuses the call with a
clear 502), and gives the pipeline litellm's answer rendered back in the wire's own API:
`chat_answer` (a whole `chat.completion`), `chat_stream` (a `ChatStream` rendering its chunks)
and `chat_error` (litellm's OpenAI-shaped error body with the provider's status). `ChatDefaults`
holds the defaults every `BaseWire` inherits: no request rendering, and the chat API's own
answers, streams and errors unchanged (the chat wire's identity).
"""

from __future__ import annotations

from typing import Protocol

from .. import codec
from ..types import Json


class ChatStream(Protocol):
    """Renders a chat-completions stream, chunk by chunk, as the client API streams."""

    def chunk(self, data: Json) -> bytes:
        """The bytes (whole SSE events, maybe none) to send for one `chat.completion.chunk`."""

    def end(self) -> bytes:
        """The bytes that end the stream after its last chunk."""


class ChatRendering(Protocol):
    """The `Wire` members a chat-only hop calls."""

    def chat_request(self, body: Json, stream: bool) -> Json | None:
        """`body` (the wire's upstream body) as a chat-completions request asking for a `stream`
        (and its usage) or not; None when the wire cannot be served so."""

    def chat_answer(self, answer: Json) -> Json:
        """A whole `chat.completion` answering a `chat_request`, in the wire's own shape."""

    def chat_stream(self) -> ChatStream:
        """The renderer of one chat-completions stream answering a `chat_request`."""

    def chat_error(self, status: int, error: Json) -> bytes:
        """An OpenAI-shaped error body with its HTTP status, in the wire's own shape."""


class ChatFrames:
    """The chat API's own stream: each chunk as a `data:` event, then `data: [DONE]`."""

    def chunk(self, data: Json) -> bytes:
        return b"data: " + codec.dumps(data) + b"\n\n"

    def end(self) -> bytes:
        return b"data: [DONE]\n\n"


class ChatDefaults:
    """The `chat_*` members of `BaseWire`."""

    def chat_request(self, body: Json, stream: bool) -> Json | None:
        """No rendering as chat completions: a chat-only hop refuses the call."""
        return None

    def chat_answer(self, answer: Json) -> Json:
        """A whole answer in the chat API's own shape, as it is."""
        return answer

    def chat_stream(self) -> ChatStream:
        """`data:` events as they are, then `[DONE]`."""
        return ChatFrames()

    def chat_error(self, status: int, error: Json) -> bytes:
        """OpenAI's error shape, as it is."""
        return codec.dumps(error)
