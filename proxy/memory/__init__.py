"""Long-term memory (issue 30, seed phase 4): what an agent learned, kept across conversations.

Problem: ctxproxy keeps every conversation whole, but what an agent learned in one (a deploy
target, a preference, a decision) is gone in the next. Memory is scoped (a project, a user, the
tenant), editable and deletable by operators, and every memory keeps where it came from.

How, one module per step:

* `scopes` -- which scopes a request has: `project:<key>` (a header, the agent's working
  directory, or a regex over the system prompt), `user:<client name>`, `tenant`.
* `access` -- one request's memory (`recollect`): the block injected into its projection and
  the tool the proxy offers and answers itself, through recall's detour (`proxy.recall.toolbox`).
* `render` -- the injected block and the tool's results, delimited data with ids and provenance.
* `actions` -- search, save, update, forget (and an operator's approve) against the store;
  conflicts are settled by evidence (a user-stated correction supersedes), never by last write.
* `evidence` -- where a text came from in the history (user/assistant text, or only tool
  output: then `unconfirmed`) and the links it may not carry.
* `tool` -- the tool's byte-stable definition per wire and whether a request gets it.

The records are the store's (`proxy.store.memories`, every backend, the contract suite). The
defenses and the risks are in docs/memory.md.

Example: conversation 1 saves "deploy target: staging-2" (user-stated: active); conversation 2,
in the same project, is injected a `<memories>` block listing it; its user corrects the value
and the model saves "deploy target: staging-3", which supersedes the first; conversation 3 is
injected the corrected value only.
"""
