"""What a request's path (and query) says about the call, before its body is read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """What a model call's path (and query) says: the path it came on, and the model and stream
    flag when the API carries them there (Gemini: `/v1beta/models/{model}:streamGenerateContent`);
    None where the body says (`Wire.envelope`)."""

    path: str
    model: str | None = None
    stream: bool | None = None
