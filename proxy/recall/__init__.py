"""Recall (DESIGN step 6, invariant 12): a tool the proxy offers the model over the branch's stored history.

Problem: trimming and summaries keep every call inside the window, but a fact stated long ago (a
path in a tool result, an id, a number the user gave) may no longer be in what the model sees. The
store still has it whole; the model only needs a way to ask.

How, one module per step:

* `tool` -- whether a request gets the tool, and its definition in each wire's own format
  (`Wire.tool_definition`: a chat `function`, an Anthropic `input_schema`, ...). The definition depends
  only on the policy and the wire, so it is byte-identical on every request of a conversation and
  prompt caches keep hitting; it is appended before projecting, so it counts in the budget.
* `read` -- the upstream's answer, read just far enough to see whether it calls the tool: a whole
  body is read whole; a stream is buffered until its first text (then relayed) or, once it calls
  any tool, to its end (a recall call beside client calls consumes the whole answer).
* `watch` -- a stream relayed from its first text is still watched: a recall call after the text
  is answered and the follow-up's events continue the client's stream, rewritten by the wire
  (`Wire.continuation`: block indexes, output indexes, sequence numbers), so the client gets one
  message.
* the follow-up request's new messages are the wire's, in the common model: the assistant turn
  with its recall calls only (`Wire.detour_turn`: Anthropic thinking / redacted_thinking blocks
  with their signatures kept before the `tool_use`; Responses reasoning items with
  `encrypted_content` kept before the `function_call`), then one tool result per call
  (`Wire.tool_result`, its text from `answer`).
* `answer` -- the tool result: a search of the branch's lineage (`policies.search`) or one event
  whole, bounded by `max_result_tokens` (a longer one is cut, its marker naming the `offset` that
  reads on: every byte can be read, page by page).
* `detour` -- the loop: answer, call upstream again, at most `max_rounds` times (the last round
  without the tool); each consumed answer is a call record with `purpose: recall`. None of the
  detour becomes an event. An upstream that rejects the request with the tool (a 400 before any
  byte) gets it once more without; when that is accepted the route and model are remembered
  (`memory`) and never offered the tool again in this process.

Example: the model answers `ctxproxy_recall({"query": "listen_port"})`; the proxy sends the same
request plus that call and a `<conversation_history_search>` result naming event 3; the model's
next answer ("the port is 8443") is what the client gets, with that answer's usage.
"""
