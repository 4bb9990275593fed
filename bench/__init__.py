"""ctxproxy benchmarks (issue #4): `python -m bench` (full, a few minutes) or `python -m bench --quick`.

Starts its own mock upstream, reference pass-through hop, ctxproxy and (if it installs) the
LiteLLM proxy on 127.0.0.1, drives them with a separate load-generator process, and writes
`bench/results/<stamp>/report.{md,json}` plus `bench/results/latest.{md,json}`.
"""
