"""The admin API of shadow mode (`proxy/shadow/`): the divergence report and the pairs behind it.

`GET /admin/shadow` reads the shadow call records started since `since` (default: seven days
ago; Unix seconds or ISO 8601), newest first, at most `limit`, of one `tenant` when given, and
answers the report (`proxy/shadow/report.py`: per route, model and rewrite kind, the divergence
rate and its bootstrap interval beside the A/A floor) and the diverged pairs, newest first (at
most `pairs`): the call the client got, its shadow, what the rewrite left out and both next steps.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.routing import Route

from ..asgi import RawResponse, json_response
from ..services import Services
from ..shadow.report import diverged, report
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


async def shadow_report(request: Request) -> RawResponse:
    state = state_of(request)
    since, calls = await shadow_calls(state, request)
    listed = int_param(request, "pairs", 50, 0, 1000)
    return json_response({"since": since, "report": report(calls), "diverged": diverged(calls, listed)})


routes = [Route("/admin/shadow", shadow_report, methods=["GET"])]
