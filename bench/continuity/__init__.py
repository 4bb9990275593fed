"""Continuity under pressure (issue 10): planted facts in long agent runs, at small windows, on
the three wires, answered with recall, without it, and with the whole history.

    python -m bench.continuity [--windows 8000,16000,32000] [--wires chat,anthropic,responses]
                               [--episodes 30] [--steps 11] [--json results.json]

`script.py` is the session, `model.py` the scripted model and summarizer, `wires.py` both sides
of each wire, `run.py` the runs and their measurements, `__main__.py` the report.
"""
