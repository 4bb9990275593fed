"""The serving edge: the server and its workers, the guarded request head, the gate (cap, drain,
readiness), the ASGI app that dispatches to the pipeline (proxy/chat.py), and the endpoints
beside the model calls (models, count_tokens, health, metrics, admin). The edge depends on the
pipeline's modules; none of them depends on it."""
