"""What each client key and tenant may spend and has spent this period: the one description the
admin API (`/admin/keys`, `/admin/tenants`) and the inspector (`/ui/keys`) show.

A key is listed with its limits and `standing`: per limit, what the current day, month or minute
has used (`Admission.standing` reads the counters), the limit and when it resets. The configured
clients come first (`source: config`), then the keys made through the admin API (`source: api`).
"""

from __future__ import annotations

from typing import Any

from .quota import Account, Quota
from .services import Services
from .store.access import ApiKey


async def shown_key(state: Services, key: ApiKey) -> dict[str, Any]:
    """A key made through the admin API as it is listed (its digest never is)."""
    quota = Quota(**key.limits)
    account = Account("key", key.id, key.name, quota)
    expired = key.expires_at is not None and state.clock() >= key.expires_at
    return {**key.to_dict(), "source": "api", "expired": expired, "standing": await state.admission.standing(account)}


async def describe_keys(state: Services, tenant: str | None = None) -> list[dict[str, Any]]:
    """Every client key (of `tenant`, when named) as the admin API and the inspector show it."""
    data: list[dict[str, Any]] = []
    for client in state.config.clients:
        if tenant not in (None, client.tenant_name):
            continue
        account = Account("key", client.name, client.name, client.quota or Quota())
        data.append(
            {
                "id": client.name,
                "name": client.name,
                "tenant": client.tenant_name,
                "routes": client.routes,
                "limits": (client.quota or Quota()).model_dump(exclude_none=True),
                "source": "config",
                "standing": await state.admission.standing(account),
            }
        )
    for key in await state.store.list_api_keys():
        if tenant in (None, key.tenant):
            data.append(await shown_key(state, key))
    return data


async def describe_tenants(state: Services) -> list[dict[str, Any]]:
    data = []
    for name, quota in state.config.tenants.items():
        standing = await state.admission.standing(Account("tenant", name, name, quota))
        data.append({"tenant": name, "limits": quota.model_dump(exclude_none=True), "standing": standing})
    return data
