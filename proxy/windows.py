"""The windows and output reserves every model call is budgeted against, and where each came from.

A route's window is its policy's `context_window`, else litellm's model map, else
`DEFAULT_WINDOW`; lowered to what the upstream itself said in an overflow error (`Estimator`).
The reply reserve is the request's `max_completion_tokens`/`max_tokens`/`max_output_tokens`,
else the policy's `max_output_tokens`, else the model's max output capped at a quarter of the
window.

The summarizer's window matters as much: a summary request sized for a window the summarizer
does not have is refused on every attempt, and no checkpoint ever commits. With no
`summarizer.model` the summarizer is the route's own model and shares its window. A
`summarizer.model` gets `summarizer.context_window`, else litellm's map, else (a model litellm
does not know) the smallest window of the routes that use its policy and of the request's own
model: a guess on the safe side, corrected by the summarizer's own overflow errors. Each policy's
assumptions are logged once at start-up (`describe`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from policies.base import Budget

from .catalog import ModelCatalog
from .config import Config
from .errors import ContextLengthExceeded
from .estimate import Estimator, Key
from .policy_settings import Policy
from .types import Json

REPLY_PRIMING_TOKENS = 3
DEFAULT_WINDOW = 128_000


@dataclass(frozen=True)
class Sized:
    """A window or reserve and where it came from (for the start-up log and the inspector)."""

    tokens: int
    source: str


class Windows:
    def __init__(self, catalog: ModelCatalog, estimator: Estimator) -> None:
        self.catalog = catalog
        self.estimator = estimator
        self._smallest: dict[str, Sized] = {}
        """per policy name: the smallest window of the routes using it (those known at start-up)"""

    def configure(self, config: Config) -> list[str]:
        """Learn which routes use which policy; one line per policy saying what it assumes."""
        lines = []
        for name, policy in config.policies.items():
            routes = [route for route in config.routes if route.policy == name]
            known = [
                (self.window(policy, r.upstream.model), r.name) for r in routes if self._known(policy, r.upstream.model)
            ]
            if known:
                tokens, route = min(known, key=lambda pair: pair[0].tokens)
                self._smallest[name] = Sized(tokens.tokens, f"the smallest window of its routes ({route})")
            lines.append(self.describe(name, policy, [route.upstream.model for route in routes]))
        return lines

    def _known(self, policy: Policy, model: str | None) -> bool:
        info = self.catalog.info(model) if model else None
        return bool(policy.context_window or (info and info.context_window))

    def window(self, policy: Policy, model: str | None, key: Key | None = None) -> Sized:
        """The route's window: configured, from litellm's map or the default; lowered to the one
        the upstream named in an overflow error for `key`."""
        info = self.catalog.info(model) if model else None
        if policy.context_window:
            sized = Sized(policy.context_window, "policy context_window")
        elif info and info.context_window:
            sized = Sized(info.context_window, "litellm's model map")
        else:
            sized = Sized(DEFAULT_WINDOW, "default")
        learned = self.estimator.window(key) if key is not None else None
        if learned is not None and learned < sized.tokens:
            return Sized(learned, "the upstream's overflow error")
        return sized

    def output(self, policy: Policy, model: str, body: Json, window: int) -> int:
        """The request's reply reserve; a 400 when it leaves no room for input."""
        requested = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
        if isinstance(requested, int) and not isinstance(requested, bool) and requested > 0:
            output = requested
        elif policy.max_output_tokens:
            output = policy.max_output_tokens
        else:
            info = self.catalog.info(model)
            model_max = info.max_output_tokens if info and info.max_output_tokens else window // 4
            output = min(model_max, window // 4)
        if output >= window:
            raise ContextLengthExceeded(
                f"max_tokens ({output:,}) leaves no room for input in this model's {window:,}-token window.",
                param="max_tokens",
            )
        return output

    def summarizer_window(self, policy: Policy, model: str, route: str | None = None, policy_name: str = "") -> Sized:
        """The summarizer's window (module docstring); `route` keys what its errors taught."""
        settings = policy.summarizer
        if settings.model is None:
            return self.window(policy, model, (route, model) if route else None)
        info = self.catalog.info(settings.model)
        if settings.context_window:
            sized = Sized(settings.context_window, "summarizer.context_window")
        elif info and info.context_window:
            sized = Sized(info.context_window, "litellm's model map")
        else:
            own = self.window(policy, model, (route, model) if route else None)
            smallest = self._smallest.get(policy_name)
            sized = Sized(own.tokens, "the request's own window; litellm does not know the model")
            if smallest is not None and smallest.tokens <= own.tokens:
                sized = Sized(smallest.tokens, smallest.source + "; litellm does not know the model")
        learned = self.estimator.window(summarizer_key(policy, model, route))
        if learned is not None and learned < sized.tokens:
            return Sized(learned, "the summarizer's overflow error")
        return sized

    def summarizer_output(self, policy: Policy, window: int) -> Sized:
        settings = policy.summarizer
        if settings.max_output_tokens is not None:
            output = Sized(settings.max_output_tokens, "summarizer.max_output_tokens")
        else:
            info = self.catalog.info(settings.model) if settings.model else None
            model_max = info.max_output_tokens if info and info.max_output_tokens else settings.max_tokens
            output = Sized(min(settings.max_tokens, model_max, window // 4), "summarizer.max_tokens")
        if output.tokens >= window:  # a `summarizer.context_window` below the reserve: keep room for input
            return Sized(window // 4, "a quarter of its window")
        return output

    def summarizer_budget(
        self, policy: Policy, model: str, route: str | None = None, policy_name: str = "", margin: float = 0.0
    ) -> Budget:
        """The summarizer's limits in our estimate's units: its window less its reply reserve,
        divided by what the estimate is learned to miss on its (route, model)."""
        window = self.summarizer_window(policy, model, route, policy_name).tokens
        output = self.summarizer_output(policy, window).tokens
        limit = window - output
        if route is not None:
            key = summarizer_key(policy, model, route)
            limit = max(1, min(limit, self.estimator.limit(key, None, 0, limit, margin)))
        return Budget(context_window=output + limit, max_output_tokens=output, fixed_tokens=REPLY_PRIMING_TOKENS)

    def summary_max_tokens(self, policy: Policy, model: str, route: str | None = None, policy_name: str = "") -> int:
        """The longest summary asked for: `summarizer.summary_max_tokens`, else a tenth of the
        route's window (at least 256); never more than the summarizer's reply reserve."""
        window = self.summarizer_window(policy, model, route, policy_name).tokens
        reserve = self.summarizer_output(policy, window).tokens
        cap = policy.summarizer.summary_max_tokens or max(256, self.window(policy, model).tokens // 10)
        return min(cap, reserve)

    def describe(self, name: str, policy: Policy, models: Iterable[str | None]) -> str:
        """What policy `name` assumes for its routes' models and its summarizer."""
        parts = []
        for model in dict.fromkeys(models):
            if model is None and not policy.context_window:
                parts.append("routes without an upstream model: the request model's window (litellm's map)")
                continue
            window = self.window(policy, model)
            reserve = f"{policy.max_output_tokens:,}" if policy.max_output_tokens else "the request's max_tokens"
            parts.append(f"{model or 'any model'}: window {window.tokens:,} ({window.source}), reply reserve {reserve}")
        summarizer = policy.summarizer.model
        if summarizer is None:
            parts.append("summarizer: the route's own model and window")
        else:
            window = self.summarizer_window(policy, "", None, name)
            output = self.summarizer_output(policy, window.tokens)
            parts.append(
                f"summarizer {summarizer}: window {window.tokens:,} ({window.source}), "
                f"reply reserve {output.tokens:,} ({output.source})"
            )
        return f"policy {name!r}: " + "; ".join(parts)


def summarizer_key(policy: Policy, model: str, route: str | None) -> Key:
    """Whose counting and window a summarizer call has: a `summarizer.model` is an upstream of its
    own, whichever route's conversation it summarizes (what one route's calls teach, all use);
    else the route's own model."""
    if policy.summarizer.model:
        return ("summarizer", policy.summarizer.model)
    return (route or "", model)
