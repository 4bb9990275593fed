"""The long-term memory bench (issue 30): sessions of several conversations per project with facts,
corrections, forgets and cross-project and cross-tenant distractors, against a scripted model
that uses the memory tool when offered (`model.py`), on the three wires.

    python -m bench.memory [--projects 6] [--wires chat,anthropic,responses] [--json results.json]

`script.py` is the sessions, `model.py` the scripted model, `run.py` the runs (with memory and
without), `__main__.py` the report: correct latest values, stale answers after a correction,
leaks across scopes and tenants, forgotten memories returned, the tokens the injection adds per
request, and the bill with and without memory.
"""
