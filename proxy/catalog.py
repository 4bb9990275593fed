"""Model metadata (context window, max output, prices) from litellm's bundled model map.

The JSON file ships inside the litellm package; reading it directly is cheap, done once, and
needs neither the network (litellm would fetch a fresh map at import unless told not to) nor
`import litellm`, which takes seconds. Lookups try the name as given, without a provider prefix, and without a
trailing date stamp (`gpt-4o-2024-08-06` -> `gpt-4o`).
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DATE_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")


@dataclass(frozen=True)
class ModelInfo:
    context_window: int | None
    max_output_tokens: int | None
    input_cost_per_token: float | None = None
    output_cost_per_token: float | None = None
    cache_read_cost_per_token: float | None = None
    cache_write_cost_per_token: float | None = None


def _map_path() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model_prices_and_context_window_backup.json"
    return path if path.exists() else None


class ModelCatalog:
    def __init__(self, data: dict[str, Any] | None = None) -> None:
        if data is None:
            path = _map_path()
            data = json.loads(path.read_text()) if path else {}
        self._data = data
        self._cache: dict[str, ModelInfo | None] = {}

    def _candidates(self, model: str) -> list[str]:
        names = [model]
        if "/" in model:
            names.append(model.split("/", 1)[1])
        names += [_DATE_SUFFIX.sub("", n) for n in names]
        return names

    def info(self, model: str) -> ModelInfo | None:
        if model in self._cache:
            return self._cache[model]
        found: ModelInfo | None = None
        for name in self._candidates(model):
            entry = self._data.get(name)
            if isinstance(entry, dict) and (entry.get("max_input_tokens") or entry.get("max_tokens")):
                found = ModelInfo(
                    context_window=entry.get("max_input_tokens") or entry.get("max_tokens"),
                    max_output_tokens=entry.get("max_output_tokens"),
                    input_cost_per_token=entry.get("input_cost_per_token"),
                    output_cost_per_token=entry.get("output_cost_per_token"),
                    cache_read_cost_per_token=entry.get("cache_read_input_token_cost"),
                    cache_write_cost_per_token=entry.get("cache_creation_input_token_cost"),
                )
                break
        if len(self._cache) > 4096:  # model names come from clients: keep the cache bounded
            self._cache.clear()
        self._cache[model] = found
        return found
