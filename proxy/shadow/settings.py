"""A policy's `shadow:` section: how often, how costly and how close together shadow pairs may be.

Part of a policy (`proxy.policy_settings.Policy.shadow`), validated with the rest of the config at
start-up. Off by default (`rate: 0`): a shadow call is a second upstream call the operator pays
for, so a team turns it on on purpose, with a daily cap (`docs/shadow.md`).
"""

from __future__ import annotations

from pydantic import Field

from ..tool_settings import Frozen


class Shadow(Frozen):
    """`rate`: the share of eligible requests that get a shadow pair (0: off, 1: every one), chosen
    by a hash of the request, not at random, so the same traffic samples the same requests.
    `max_usd_per_day`: the most the policy's shadow calls may cost per UTC day, summed from the
    ledger (so the cap holds across replicas); a call whose price litellm does not know counts 0.
    `min_interval_s`: the least time between two shadow calls of the policy in one process.
    `context_window`: the model's real window, which the client's own request must fit to get a
    twin (default: litellm's model map, else the policy's `context_window`): for a model litellm
    does not know, on a policy whose window is a budget below the real one."""

    rate: float = Field(0.0, ge=0, le=1)
    max_usd_per_day: float = Field(1.0, ge=0)
    min_interval_s: float = Field(0.0, ge=0)
    context_window: int | None = Field(None, gt=0)

    @property
    def enabled(self) -> bool:
        return self.rate > 0 and self.max_usd_per_day > 0

    def describe(self) -> str:
        """One line for `check-config` and the start-up banner."""
        if not self.enabled:
            return "shadow off"
        return (
            f"shadow {self.rate:g} of requests, at most ${self.max_usd_per_day:g}/day, {self.min_interval_s:g}s apart"
        )
