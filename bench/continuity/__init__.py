"""Continuity under pressure (issue 10): planted facts in long agent runs, at small windows, on
the three wires, answered with recall, without it, and with the whole history, against upstreams
that count tokens their own way (another tokenizer, other framing, a bias, a per-request error)
and enforce their window and bill by that count, as real providers do.

    python -m bench.continuity [--counting exact,cl100k,framing,bias+5,bias-5,jitter8]
                               [--windows 8000,16000,32000] [--wires chat,anthropic,responses]
                               [--episodes 30] [--steps 11] [--concurrency 6] [--no-whole]
                               [--json results.json]

The first counting mode is the reference: only it also runs without recall and with the whole
history. The summarizer is a model litellm does not know (`openai/acme-summarizer`, served by
each mode's chat upstream with a 16,000-token window the proxy is not told) that overshoots its
length instruction by 10-30%.

`script.py` is the session, `model.py` the scripted model and summarizer, `wires.py` both sides
of each wire, `run.py` the runs, `measure.py` what they did (from the upstreams' records and the
proxy's admin API), `__main__.py` the report.
"""
