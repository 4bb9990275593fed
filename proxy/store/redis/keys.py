"""The key layout: every key a conversation owns carries its hash tag, so one conversation is one slot.

Redis Cluster routes a key by the part between its first ``{`` and ``}``; a script may only touch
keys of one slot, and only keys it was given in KEYS. So a conversation keeps a fixed set of keys
whose names follow from its id alone, and everything variable (branches, events, checkpoints, call
records, leases) is a field or member inside them: a script never builds a key name from a value.

Ids carry the tag. A conversation id is ``c_`` + 16 hex digits; its tag is the first two
(256 tags, each a slot of its own, spread over the primaries by the cluster's slot map; enough to
balance a few dozen primaries, few enough that a listing scatters over all of them in one pipelined
pass). Its main branch is ``b_`` + the same 16 digits, a
fork ``b_`` + the 16 digits + ``_`` + random hex, so a branch id names its conversation and slot.
A conversation created for an external id (X-Conversation-Id) gets a tag derived from the tenant
and that id, so the external-id key lives in the conversation's slot too.

Per conversation (K = ``P{tag}:``, cid its id):

    K conv:{cid}        hash  id tenant external_id main_branch_id created_at updated_at
    K branches:{cid}    hash  {bid}:parent {bid}:fork {bid}:head {bid}:created {bid}:updated
                              {bid}:sys {bid}:active   (one group of fields per branch)
    K blist:{cid}       list  branch ids in creation order
    K events:{cid}      hash  {bid}:{seq} -> event JSON
    K chain:{cid}       hash  {bid}:{seq} -> chain hash, and h:{chain} -> "{bid} {seq}" (local identity)
    K cks:{cid}         hash  {ckid} -> JSON, {ckid}:status :gen :covered :branch :created
    K cklist:{cid}      list  checkpoint ids in creation order (failed ones too)
    K calls:{cid}       zset  call id -> started_at
    K records:{cid}     hash  call id -> call record JSON
    K last:{cid}        hash  {bid}|{purpose} -> "{started_at} {call id}" (the newest call)
    K leases:{cid}      hash  lease:{bid} -> "{owner} {token} {expires_ms}", token:{bid} -> counter
    K ext:{scoped}      string external id -> conversation id (tenant-scoped)

Per tag, shared by the conversations of that tag (the cluster-wide indexes, sharded so that a
script updates them in the conversation's own slot; listings scatter over the 256 shards and merge):

    K convs             zset  conversation id -> updated_at (listing, retention)
    K tombstones        zset  deleted conversation id -> deleted_at (fencing late writes)
    K call-index        zset  "{cid}|{call id}" (or "|{call id}" for a call no conversation owns) -> started_at
    K orphan-calls      hash  call id -> record, for calls no conversation owns (tag from the call id)
    K cks-retired       zset  "{cid}|{ckid}" -> created_at (retention of superseded and failed checkpoints)

Per memory tag (the first two hex digits of a tenant's hash, `memories.memory_tag`; a memory id
carries it): one tenant's memories are one slot, so a save that supersedes is one script.

    K memories                  hash  memory id -> record JSON (every tenant of the tag)
    K mem-index                 zset  memory id -> updated_at (the admin listing, scattered)
    K mem-tenant:{scoped}       zset  memory id -> updated_at (one tenant's; compare-and-set reads it)
    K mem-scope:{scoped scope}  set   memory ids of one tenant's scope

Untagged (single keys, anywhere in the cluster):

    P meta:tenant_salt                      string  hex salt of the tenant fingerprints
    P meta:layout                           string  the layout version ("2")
    P hash:{scoped tenant}:{chain}          set     conversation ids holding that chain hash (tenant-wide identity)
    P blob:{digest}                         string  content-addressed system prefixes / tool definitions
    P counter:{name}                        string  a budget's or rate limit's counter (access.py)

And one slot of its own for the client keys made through the admin API (access.py):

    P{access}:api-keys                      hash    key digest -> key record JSON

The tenant-wide identity index is the one thing outside the conversation's slot: a request that
names no conversation is matched through it. Its entries are written before the append that stores
the events (an entry whose conversation does not hold the hash is skipped when read), removed again
when that append finds the conversation deleted, and removed by delete from the hashes the
conversation stored. The same layout serves one server and a cluster.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from ..memories import memory_tag

TAG_DIGITS = 2
TAGS = tuple(f"{i:02x}" for i in range(16**TAG_DIGITS))
LAYOUT = "2"

_CONV = re.compile(r"c_([0-9a-f]{16})")
_BRANCH = re.compile(r"b_([0-9a-f]{16})(?:_[0-9a-f_]+)?")

CONV_KINDS = ("conv", "branches", "blist", "events", "chain", "cks", "cklist", "calls", "records", "last", "leases")
SHARD_KINDS = ("convs", "tombstones", "call-index", "cks-retired")


def scoped(tenant: str, value: str) -> str:
    """``{len(tenant)}:{tenant}:{value}``: unambiguous whatever either part contains."""
    return f"{len(tenant)}:{tenant}:{value}"


def ext_tag(tenant: str, external_id: str) -> str:
    return hashlib.sha256(scoped(tenant, external_id).encode("utf-8", "surrogatepass")).hexdigest()[:TAG_DIGITS]


def call_tag(call_id: str) -> str:
    return hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:TAG_DIGITS]


def new_conversation_id(tag: str | None = None) -> str:
    digits = secrets.token_hex(8)
    return "c_" + (digits if tag is None else tag + digits[TAG_DIGITS:])


def main_branch_id(conversation_id: str) -> str:
    return "b_" + conversation_id[2:]


def conversation_of(branch_id: str) -> str | None:
    """The conversation a branch id names, or None when it is no id this layout makes."""
    found = _BRANCH.fullmatch(branch_id)
    return None if found is None else "c_" + found.group(1)


def is_conversation_id(value: str) -> bool:
    return _CONV.fullmatch(value) is not None


def tag_of(conversation_id: str) -> str:
    return conversation_id[2 : 2 + TAG_DIGITS]


class Layout:
    """Key names under prefix P. The prefix must not contain braces (they would move the hash tag)."""

    def __init__(self, prefix: str) -> None:
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"the key prefix {prefix!r} must not contain '{{' or '}}' (Redis Cluster hash tags)")
        self.prefix = prefix

    def tagged(self, tag: str, kind: str, name: str = "") -> str:
        return f"{self.prefix}{{{tag}}}:{kind}" + (f":{name}" if name else "")

    def conversation(self, cid: str) -> list[str]:
        """The conversation's keys then its shard's, in the order the scripts read KEYS (lib.lua)."""
        tag = tag_of(cid)
        return [self.tagged(tag, kind, cid) for kind in CONV_KINDS] + self.shard(tag)

    def shard(self, tag: str) -> list[str]:
        return [self.tagged(tag, kind) for kind in SHARD_KINDS]

    def one(self, cid: str, kind: str) -> str:
        return self.tagged(tag_of(cid), kind, cid)

    def ext(self, tenant: str, external_id: str) -> str:
        return self.tagged(ext_tag(tenant, external_id), "ext", scoped(tenant, external_id))

    def orphan(self, call_id: str) -> list[str]:
        """A call no conversation owns: its record hash, the call index and the tombstones of its shard."""
        tag = call_tag(call_id)
        return [self.tagged(tag, "orphan-calls"), self.tagged(tag, "call-index"), self.tagged(tag, "tombstones")]

    def memory(self, tenant: str, scope: str) -> list[str]:
        """One tenant's memory keys for one scope, in the order the memory scripts read KEYS."""
        tag = memory_tag(tenant)
        return [
            self.tagged(tag, "memories"),
            self.tagged(tag, "mem-index"),
            self.tagged(tag, "mem-tenant", scoped(tenant, "")),
            self.tagged(tag, "mem-scope", scoped(tenant, scope)),
        ]

    def memory_scopes(self, tenant: str, scopes: list[str]) -> list[str]:
        """The records hash then one set per scope (memory_read.lua)."""
        tag = memory_tag(tenant)
        return [self.tagged(tag, "memories"), *(self.tagged(tag, "mem-scope", scoped(tenant, s)) for s in scopes)]

    def identity(self, tenant: str, chain_hash: str) -> str:
        return f"{self.prefix}hash:{scoped(tenant, chain_hash)}"

    def plain(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)
