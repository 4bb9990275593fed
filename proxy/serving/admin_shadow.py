"""The admin API of shadow mode (`proxy/shadow/`): the divergence report and the pairs behind it.

`GET /admin/shadow` reads the shadow call records started since `since` (default: seven days
ago; Unix seconds or ISO 8601), newest first, at most `limit`, of one `tenant` when given, and
answers the report (`proxy/shadow/report.py`: per route, model and rewrite kind, the divergence
rate and its bootstrap interval beside the A/A floor) and the diverged pairs, newest first (at
most `pairs`): the call the client got, its shadow, what the rewrite left out and both next steps.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from ..asgi import RawResponse, json_response
from ..services import Services
from ..shadow.report import pair_of, report
from ..store.base import CallRecord
from .admin import int_param, state_of, time_param

WEEK = 7 * 86_400.0


async def shadow_calls(state: Services, request: Request) -> tuple[float, list[CallRecord]]:
    """The shadow records the query asks for, and the time they start from."""
    since = time_param(request, "since")
    since = time.time() - WEEK if since is None else since
    limit = int_param(request, "limit", 5000, 1, 50_000)
    calls = await state.store.calls_of_purpose("shadow", since, limit)
    tenant = request.query_params.get("tenant")
    return since, [call for call in calls if tenant is None or call.tenant == tenant]


def diverged(calls: list[CallRecord], limit: int) -> list[dict[str, Any]]:
    """The diverged pairs among `calls` (newest first), as the API and the inspector list them."""
    out = []
    for call in calls:
        pair = pair_of(call)
        if pair is None or pair.get("outcome") != "diverged":
            continue
        out.append(
            {
                "shadow_call": call.id,
                "of": pair.get("of"),
                "conversation_id": call.conversation_id,
                "tenant": call.tenant,
                "route": call.route,
                "model": call.model,
                "started_at": call.started_at,
                "kinds": pair.get("kinds") or [],
                "removed": pair.get("removed"),
                "difference": pair.get("difference"),
                "steps": pair.get("steps"),
            }
        )
        if len(out) >= limit:
            break
    return out


async def shadow_report(request: Request) -> RawResponse:
    state = state_of(request)
    since, calls = await shadow_calls(state, request)
    listed = int_param(request, "pairs", 50, 0, 1000)
    return json_response({"since": since, "report": report(calls), "diverged": diverged(calls, listed)})


routes = [Route("/admin/shadow", shadow_report, methods=["GET"])]
