"""Upstream error bodies as providers really send them -> overflow / tool / other, with the numbers.

Every body carries a comment naming where it was seen: the provider's source, or an issue thread
quoting it. Bodies quoted there as Python reprs are rebuilt with json.dumps from the same fields;
bodies quoted only as an exception's text are passed as that text (it is what a wrapper relays).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.upstream.classify import MAX_BODY, MAX_MESSAGE, Rejection, classify, overshoot
from tests.support.lanes import examples


def _j(value: object) -> bytes:
    return json.dumps(value).encode()


# (status, body, (kind, window, requested, input_tokens, output_tokens, overshoot without a reserve))
OVERFLOWS = [
    pytest.param(
        # OpenAI chat completions, messages alone: chathub-dev/chathub#126
        400,
        b'{"error":{"message":"This model\'s maximum context length is 4097 tokens. However, your messages resulted'
        b' in 4294 tokens. Please reduce the length of the messages.","type":"invalid_request_error",'
        b'"param":"messages","code":"context_length_exceeded"}}',
        ("overflow", 4097, None, 4294, None, 197),
        id="openai-messages-resulted",
    ),
    pytest.param(
        # Azure OpenAI, messages + completion: BerriAI/litellm#2745
        400,
        _j(
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, you requested 10152 "
                    "tokens (6152 in the messages, 4000 in the completion). Please reduce the length of the "
                    "messages or completion.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
        ),
        ("overflow", 8192, 10152, 6152, 4000, 1960),
        id="azure-requested-parts",
    ),
    pytest.param(
        # OpenAI legacy completions, exception text: hwchase17/chat-your-data#10
        400,
        b"This model's maximum context length is 4097 tokens, however you requested 4231 tokens (3975 in your"
        b" prompt; 256 for the completion). Please reduce your prompt; or completion length.",
        ("overflow", 4097, 4231, 3975, 256, 134),
        id="openai-legacy-completions",
    ),
    pytest.param(
        # OpenAI Responses API, an error event of a 200 stream (passed as 400): dyad-sh/dyad#1672
        400,
        b'{"error":{"type":"error","sequence_number":2,"error":{"type":"invalid_request_error","code":'
        b'"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust'
        b' your input and try again.","param":"input"}}}',
        ("overflow", None, None, None, None, None),
        id="responses-no-numbers",
    ),
    pytest.param(
        # DeepSeek (code is invalid_request_error, not context_length_exceeded): stackblitz-labs/bolt.diy#227
        400,
        b'{"error":{"message":"This model\'s maximum context length is 131072 tokens. However, you requested 133034'
        b" tokens (125034 in the messages, 8000 in the completion). Please reduce the length of the messages or"
        b' completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}',
        ("overflow", 131072, 133034, 125034, 8000, 1962),
        id="deepseek",
    ),
    pytest.param(
        # Groq names no numbers at all: letta-ai/letta#1963
        400,
        b'{"error":{"message":"Please reduce the length of the messages or completion.","type":'
        b'"invalid_request_error","param":"messages","code":"context_length_exceeded"}}',
        ("overflow", None, None, None, None, None),
        id="groq-no-numbers",
    ),
    pytest.param(
        # vLLM <= 0.10, serving_engine.py: vllm-project/vllm#20409 (ValueError text)
        400,
        b"This model's maximum context length is 16384 tokens. However, you requested 122946 tokens (112946 in"
        b" the messages, 10000 in the completion). Please reduce the length of the messages or completion.",
        ("overflow", 16384, 122946, 112946, 10000, 106562),
        id="vllm-messages-completion",
    ),
    pytest.param(
        # vLLM, total only, top-level "object": "error" shape: THUDM/LongBench#104 (shape: vllm-project/vllm#21052)
        400,
        _j(
            {
                "object": "error",
                "message": "This model's maximum context length is 131072 tokens. However, you "
                "requested 351430 tokens. Please reduce the length of the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        ),
        ("overflow", 131072, 351430, None, None, 220358),
        id="vllm-total-only",
    ),
    pytest.param(
        # vLLM 0.11, the input alone: whois-api-llc/web-categorization-v2 docs/FIX_1536_TOKEN_LIMIT.md
        400,
        b"This model's maximum context length is 1536 tokens. However, your request has 4176 input tokens."
        b" Please reduce the length of the input messages.",
        ("overflow", 1536, None, 4176, None, 2640),
        id="vllm-request-has-input",
    ),
    pytest.param(
        # vLLM 0.11, max_tokens over what the input leaves: andrewcho-dev/opsconductor-ng TOKEN_LIMIT_FIX.md
        400,
        b"{\"error\":{\"message\":\"'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum"
        b' context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None",'
        b'"type":"BadRequestError","param":null,"code":400}}',
        ("overflow", 4096, 10778, 2778, 8000, 6682),
        id="vllm-max-tokens-too-large",
    ),
    pytest.param(
        # vLLM renderers/params.py wording (vllm-project/vllm), tokenizing stopped one past the limit, so
        # "at least": a user's report of this body, as stored in the code index without a repository name
        400,
        b'{"error":{"message":"This model\'s maximum context length is 262144 tokens. However, you requested 0'
        b" output tokens and your prompt contains at least 262145 input tokens, for a total of at least 262145"
        b" tokens. Please reduce the length of the input prompt or the number of requested output tokens."
        b' (parameter=input_tokens, value=262145)","type":"BadRequestError","param":"input_tokens","code":400}}',
        ("overflow", 262144, 262145, 262145, 0, 1),
        id="vllm-at-least",
    ),
    pytest.param(
        # vLLM, prompt measured in characters before tokenizing, so no input count: gi-dellav/zerostack#22
        400,
        b'{"error":{"message":"This model\'s maximum context length is 131072 tokens. However, you requested 131072'
        b" output tokens and your prompt contains 14233 characters (more than 0 characters, which is the upper"
        b" bound for 0 input tokens). Please reduce the length of the input prompt or the number of requested"
        b' output tokens. (parameter=input_text, value=14233)","type":"BadRequestError","param":"input_text",'
        b'"code":400}}',
        ("overflow", 131072, None, None, 131072, None),
        id="vllm-characters",
    ),
    pytest.param(
        # vLLM engine check: vllm-project/vllm#12165
        400,
        b"ValueError: The prompt (total length 25938) is too long to fit into the model (context length 4096)."
        b" Make sure that `max_model_len` is no smaller than the number of text tokens plus multimodal tokens.",
        ("overflow", 4096, None, 25938, None, 21842),
        id="vllm-engine",
    ),
    pytest.param(
        # OpenRouter, input + output: GearUnclear/LibreChat User_Docs/TOKEN-LIMITS-ISSUE.md
        400,
        b"This endpoint's maximum context length is 131072 tokens. However, you requested about 132463 tokens"
        b" (1463 of text input, 131000 in the output). Please reduce the length of either one.",
        ("overflow", 131072, 132463, 1463, 131000, 1391),
        id="openrouter",
    ),
    pytest.param(
        # OpenRouter, text input alone: refly-ai/refly#1177
        400,
        b"400 This endpoint's maximum context length is 32768 tokens. However, you requested about 42832 tokens"
        b' (42832 of text input). Please reduce the length of either one, or use the "middle-out" transform to'
        b" compress your prompt automatically.",
        ("overflow", 32768, 42832, None, None, 10064),
        id="openrouter-text-only",
    ),
    pytest.param(
        # OpenRouter relaying the provider's body as a JSON string in metadata.raw: cline/cline#13194
        400,
        b'{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"{\\"error\\":{\\"message'
        b'\\":\\"This model\'s maximum context length is 262144 tokens. However, your messages resulted in 262897'
        b' tokens. Please reduce the length of the messages.\\",\\"type\\":\\"Bad Request\\",\\"code\\":400}}",'
        b'"provider_name":"Nvidia","is_byok":false,"provider_error_code":"400"}}}',
        ("overflow", 262144, None, 262897, None, 753),
        id="openrouter-metadata-raw",
    ),
    pytest.param(
        # Anthropic, input alone: anthropics/claude-code#12186
        400,
        b'{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens >'
        b' 200000 maximum"},"request_id":"req_011CVQe1dLrGNMJyE1ghG1av"}',
        ("overflow", 200000, None, 208310, None, 8310),
        id="anthropic-prompt-too-long",
    ),
    pytest.param(
        # Anthropic, input + max_tokens: docker/docker-agent#569
        400,
        b'{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed'
        b' context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again"},'
        b'"request_id":"req_011CUB2XUHWkFnQzxcKBbjpF"}',
        ("overflow", 200000, 242959, 178959, 64000, 42959),
        id="anthropic-input-and-max-tokens",
    ),
    pytest.param(
        # Anthropic's wording with thousands separators, as the brief quotes it
        400,
        b'{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208,923 tokens >'
        b' 200,000 maximum"}}',
        ("overflow", 200000, None, 208923, None, 8923),
        id="anthropic-separators",
    ),
    pytest.param(
        # Bedrock relaying Anthropic's words: aaif-goose/goose#7504
        400,
        b'{"message":"The model returned the following errors: prompt is too long: 227255 tokens > 200000 maximum"}',
        ("overflow", 200000, None, 227255, None, 27255),
        id="bedrock-prompt-too-long",
    ),
    pytest.param(
        # Bedrock, no numbers: aws-samples/assessment-generator#2 (ValidationException, httpStatusCode 400)
        400,
        b'{"message":"Input is too long for requested model."}',
        ("overflow", None, None, None, None, None),
        id="bedrock-input-too-long",
    ),
    pytest.param(
        # Bedrock phrase litellm maps (litellm/litellm_core_utils/exception_mapping_utils.py)
        400,
        b'{"message":"Too many input tokens"}',
        ("overflow", None, None, None, None, None),
        id="bedrock-too-many-input-tokens",
    ),
    pytest.param(
        # Gemini native, relayed as a JSON string inside the message: google-gemini/gemini-cli#5807
        400,
        b'{"error":{"message":"{\\n  \\"error\\": {\\n    \\"code\\": 400,\\n    \\"message\\": \\"The input token'
        b' count (1091639) exceeds the maximum number of tokens allowed (1048576).\\",\\n    \\"status\\":'
        b' \\"INVALID_ARGUMENT\\"\\n  }\\n}\\n","code":400,"status":"Bad Request"}}',
        ("overflow", 1048576, 1091639, 1091639, 0, 43063),
        id="gemini-nested",
    ),
    pytest.param(
        # Gemini wrapped in a list: google-gemini/gemini-cli#6678
        400,
        _j(
            [
                {
                    "error": {
                        "code": 400,
                        "message": "The input token count (1200293) exceeds the maximum number of "
                        "tokens allowed (1048576).",
                        "errors": [
                            {
                                "message": "The input token count (1200293) "
                                "exceeds the maximum number of tokens allowed (1048576).",
                                "domain": "global",
                                "reason": "badRequest",
                            }
                        ],
                        "status": "INVALID_ARGUMENT",
                    }
                }
            ]
        ),
        ("overflow", 1048576, 1200293, 1200293, 0, 151717),
        id="gemini-list-wrapped",
    ),
    pytest.param(
        # Gemini 2.5 names no input count: BerriAI/litellm#18282
        400,
        _j(
            {
                "error": {
                    "code": 400,
                    "message": "The input token count exceeds the maximum number of tokens allowed (1048576).",
                    "status": "INVALID_ARGUMENT",
                }
            }
        ),
        ("overflow", 1048576, None, None, 0, None),
        id="gemini-no-count",
    ),
    pytest.param(
        # OpenAI GPT-5 input limit, through litellm: BerriAI/litellm#18927
        400,
        b"ContextWindowExceededError: OpenAIException - Input tokens exceed the configured limit of 272000 tokens.",
        ("overflow", 272000, None, None, 0, None),
        id="openai-configured-input-limit",
    ),
    pytest.param(
        # llama.cpp server, numbers in fields beside the message: jshawtime/saywhatwant
        # docs/228-LLAMACPP-CONTEXT-SIZE-DEBUGGING.md
        400,
        b'{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it",'
        b'"type":"exceed_context_size_error","n_prompt_tokens":1140,"n_ctx":1024}}',
        ("overflow", 1024, None, 1140, None, 116),
        id="llamacpp-fields",
    ),
    pytest.param(
        # llama.cpp, an older build without the type (same document, its log before the fix)
        400,
        b'{"error":{"code":400,"message":"the request exceeds the available context size","n_prompt_tokens":1140,'
        b'"n_ctx":1024}}',
        ("overflow", 1024, None, 1140, None, 116),
        id="llamacpp-older",
    ),
    pytest.param(
        # llama.cpp with the counts in the sentence: ggml-org/llama.cpp tools/server/server-context.cpp
        # send_error wording; numbers ours, the equality case it refuses (n_tokens >= n_ctx): overshoot 1
        400,
        b'{"error":{"code":400,"message":"request (4096 tokens) exceeds the available context size (4096 tokens),'
        b' try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4096,"n_ctx":4096}}',
        ("overflow", 4096, None, 4096, None, 1),
        id="llamacpp-counts-in-sentence",
    ),
    pytest.param(
        # Mistral: wording from badlogic/pi-mono packages/ai/src/utils/overflow.ts, body shape from
        # aurelio-labs/semantic-router#297
        400,
        b'{"object":"error","message":"Prompt contains 40046 tokens and 0 draft tokens, too large for model with'
        b' 32768 maximum context length","type":"invalid_request_error","param":null,"code":null}',
        ("overflow", 32768, None, 40046, None, 7278),
        id="mistral",
    ),
    pytest.param(
        # Fireworks / Ollama Cloud: anomalyco/models.dev#6508 quotes Fireworks' "model maximum context length:
        # 1048573"; the whole body as a Go test importing ollama/ollama internal/proxy quotes the cloud's answer
        400,
        b'{"error":{"message":"The prompt is too long: 1068408, model maximum context length: 1048576","code":null}}',
        ("overflow", 1048576, None, 1068408, None, 19832),
        id="fireworks-ollama-cloud",
    ),
    pytest.param(
        # TGI (Together, Hugging Face) answers 422: bytedance/UI-TARS-desktop#626
        422,
        b'{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 65537. Given: 79993'
        b' `inputs` tokens and 1024 `max_new_tokens`"}',
        ("overflow", 65537, 81017, 79993, 1024, 15480),
        id="tgi-422",
    ),
    pytest.param(
        # Together, over by exactly one: stanford-crfm/helm#2079
        422,
        b"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 2019 `inputs` tokens"
        b" and 30 `max_new_tokens`",
        ("overflow", 2048, 2049, 2019, 30, 1),
        id="together",
    ),
    pytest.param(
        # TGI's input-only limit: meta-llama/llama#1103 (422 Unprocessable Entity)
        422,
        b'{"error":"Input validation error: `inputs` must have less than 4096 tokens. Given: 4545"}',
        ("overflow", 4096, 4545, 4545, 0, 449),
        id="tgi-inputs-limit",
    ),
    pytest.param(
        # xAI: wording and numbers from badlogic/pi-mono packages/ai/src/utils/overflow.ts; the
        # {"code", "error": string} shape as a Go client test quotes xAI's 400
        400,
        b'{"code":"Client specified an invalid argument","error":"This model\'s maximum prompt length is 131072'
        b' but the request contains 537812 tokens."}',
        ("overflow", 131072, None, 537812, None, 406740),
        id="xai",
    ),
    pytest.param(
        # LM Studio: lmstudio-ai/lmstudio-bug-tracker#546
        400,
        b"Trying to keep the first 111490 tokens when context the overflows. However, the model is loaded with"
        b" context length of only 32768 tokens, which is not enough.",
        ("overflow", 32768, None, 111490, None, 78722),
        id="lmstudio",
    ),
    pytest.param(
        # LM Studio, older: lmstudio-ai/model-catalog#38
        400,
        b"Input length 1581 exceeds context length 1500",
        ("overflow", 1500, None, 1581, None, 81),
        id="lmstudio-older",
    ),
    pytest.param(
        # litellm proxy wrapping Anthropic: BrokkAi/brokk-app#540
        400,
        b'{"error":{"message":"litellm.BadRequestError: AnthropicException - b\'{\\"type\\":\\"error\\",\\"error\\":'
        b'{\\"type\\":\\"invalid_request_error\\",\\"message\\":\\"input length and `max_tokens` exceed context'
        b" limit: 179413 + 32768 > 200000, decrease input length or `max_tokens` and try again\\\"}}'. Received"
        b' Model Group=anthropic/claude-sonnet-4-20250514\\nAvailable Model Group Fallbacks=None","type":null,'
        b'"param":null,"code":"400"}}',
        ("overflow", 200000, 212181, 179413, 32768, 12181),
        id="litellm-proxy-anthropic",
    ),
    pytest.param(
        # litellm proxy, a tool-ish Bedrock error then the fallback's overflow: BerriAI/litellm#7259 and
        # OpenHands/OpenHands#5350
        400,
        _j(
            {
                "error": {
                    "message": "litellm.BadRequestError: litellm.ContextWindowExceededError: AnthropicError - "
                    '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is '
                    'too long: 200480 tokens > 200000 maximum"}}\nReceived Model Group=anthropic/claude-3-5-'
                    "sonnet-20241022\nAvailable Model Group Fallbacks=None",
                    "type": None,
                    "param": None,
                    "code": "400",
                }
            }
        ),
        ("overflow", 200000, None, 200480, None, 480),
        id="litellm-proxy-context-window",
    ),
    pytest.param(
        # litellm exception text embedding the provider's bytes: kortix-ai/suna#172
        400,
        b'litellm.BadRequestError: AnthropicException - b\'{"type":"error","error":{"type":'
        b'"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 174167 +'
        b" 64000 > 200000, decrease input length or `max_tokens` and try again\"}}'",
        ("overflow", 200000, 238167, 174167, 64000, 38167),
        id="litellm-exception-text",
    ),
    pytest.param(
        # a Continue server relays Anthropic's overflow with a 500: continuedev/continue#5896
        500,
        b"Prompt is too long: 200348 tokens > 200000 maximum",
        ("overflow", 200000, None, 200348, None, 348),
        id="overflow-on-500",
    ),
]

TOOLS = [
    pytest.param(
        # OpenAI, schema of a function: evalstate/fast-agent#143
        400,
        _j(
            {
                "error": {
                    "message": "Invalid schema for function 'mongodb-list-databases': In context=(), object "
                    "schema missing properties.",
                    "type": "invalid_request_error",
                    "param": "tools[1].function.parameters",
                    "code": "invalid_function_parameters",
                }
            }
        ),
        id="openai-invalid-schema",
    ),
    pytest.param(
        # OpenAI, tool name pattern: brekkylab/ailoy#109
        400,
        b'{"error":{"message":"Invalid \'tools[0].function.name\': string does not match pattern. Expected a string'
        b' that matches the pattern \'^[a-zA-Z0-9_-]+$\'.","type":"invalid_request_error","param":'
        b'"tools[0].function.name","code":"invalid_value"}}',
        id="openai-tool-name",
    ),
    pytest.param(
        # OpenAI, tool description too long (a string limit, not the context window): nanbingxyz/5ire#33
        400,
        b"Invalid 'tools[6].function.description': string too long. Expected a string with maximum length 1024,"
        b" but got a string with length 2780 instead.",
        id="openai-tool-description-too-long",
    ),
    pytest.param(
        # OpenAI, tool_choice without tools: RageAgainstThePixel/OpenAI-DotNet#479
        400,
        b"{\"error\":{\"message\":\"Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are"
        b' specified.","type":"invalid_request_error","param":"tool_choice","code":null}}',
        id="openai-tool-choice",
    ),
    pytest.param(
        # Groq, tool_choice null: brianpetro/obsidian-smart-connections#942
        400,
        b'{"error":{"message":"Only allowed string values for \'tool_choice\' are none, auto, and required",'
        b'"type":"invalid_request_error"}}',
        id="groq-tool-choice",
    ),
    pytest.param(
        # Anthropic, input_schema: anthropics/claude-code#86664
        400,
        b'{"type":"error","error":{"type":"invalid_request_error","message":"tools.17.custom.input_schema: JSON'
        b" schema is invalid. It must match JSON Schema draft 2020-12 (https://json-schema.org/draft/2020-12)."
        b' Learn more about tool use at https://platform.claude.com/docs/en/agents-and-tools/tool-use/overview."},'
        b'"request_id":"req_011Ce2ZWqbB1mTx8WWqB4D8k"}',
        id="anthropic-input-schema",
    ),
    pytest.param(
        # Anthropic, tool name pattern: apify/tester-mcp-client#11
        400,
        b'{"type":"error","error":{"type":"invalid_request_error","message":"tools.7.custom.name: String should'
        b" match pattern '^[a-zA-Z0-9_-]{1,64}$'\"}}",
        id="anthropic-tool-name",
    ),
    pytest.param(
        # Gemini, OpenAI-compatible tools it cannot read: router-for-me/CLIProxyAPI#102
        400,
        b'{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \\"strict\\" at'
        b' \'request.tools[0].function_declarations[0]\': Cannot find field.","status":"INVALID_ARGUMENT",'
        b'"details":[{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":'
        b'"request.tools[0].function_declarations[0]","description":"Invalid JSON payload received. Unknown name'
        b' \\"strict\\" at \'request.tools[0].function_declarations[0]\': Cannot find field."}]}]}}',
        id="gemini-unknown-name",
    ),
    pytest.param(
        # vLLM without tool parsing (message: vllm-project/vllm#30613; shape: vllm-project/vllm#21052)
        400,
        b'{"object":"error","message":"\\"auto\\" tool choice requires --enable-auto-tool-choice and'
        b' --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}',
        id="vllm-auto-tool-choice",
    ),
    pytest.param(
        # llama.cpp without --jinja answers 500: QwenLM/Qwen3.8#44
        500,
        b'{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}',
        id="llamacpp-jinja-500",
    ),
    pytest.param(
        # llama.cpp, older build: ggml-org/llama.cpp#10920
        500,
        b'{"code":500,"message":"Unsupported param: tools","type":"server_error"}',
        id="llamacpp-unsupported-tools",
    ),
    pytest.param(
        # Ollama, OpenAI-compatible endpoint: pydantic/pydantic-ai#703
        400,
        _j(
            {
                "error": {
                    "message": "registry.ollama.ai/library/llama3:8b does not support tools",
                    "type": "api_error",
                    "param": None,
                    "code": None,
                }
            }
        ),
        id="ollama-openai",
    ),
    pytest.param(
        # Ollama, native endpoint: ollama/ollama#14795
        400,
        b'{"error":"registry.ollama.ai/library/Qwen3.5:0.8b does not support tools"}',
        id="ollama-native",
    ),
    pytest.param(
        # OpenRouter answers 404: bobrware/bobrchat#60
        404,
        b'{"error":{"message":"No endpoints found that support tool use. To learn more about provider routing,'
        b' visit: https://openrouter.ai/docs/guides/routing/provider-selection","code":404}}',
        id="openrouter-404",
    ),
]

OTHERS = [
    pytest.param(
        # Anthropic, max_tokens over the model's output cap: ChatGPTNextWeb/NextChat#4964
        400,
        b'{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 10000 > 4096, which is the'
        b' maximum allowed number of output tokens for claude-3-5-sonnet-20240620"}}',
        id="anthropic-output-cap",
    ),
    pytest.param(
        # Groq, max_completion_tokens over the model's cap: Alishahryar1/free-claude-code#1354
        400,
        b'{"message":"`max_completion_tokens` must be less than or equal to `16384`, the maximum value for'
        b' `max_completion_tokens` is less than the `context_window` for this model","type":"invalid_request_error",'
        b'"param":"max_completion_tokens"}',
        id="groq-output-cap",
    ),
    pytest.param(
        # Groq's per-minute limit is a 413 that says "reduce your message size": cottongeeks/podscript#20
        413,
        b'{"error":{"message":"Request too large for model `llama-3.3-70b-versatile` in organization'
        b" `org_01j2g5d88hfvjrgw64hnapqk8y` service tier `on_demand` on tokens per minute (TPM): Limit 6000,"
        b" Requested 10338, please reduce your message size and try again. Visit"
        b' https://console.groq.com/docs/rate-limits for more information.","type":"tokens",'
        b'"code":"rate_limit_exceeded"}}',
        id="groq-tpm-413",
    ),
    pytest.param(
        # Anthropic, a tool_use block in the history (not a tool definition): anthropics/claude-code#6695
        400,
        b'{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.tool_use.input:'
        b' Input should be a valid dictionary"},"request_id":"req_011CSZ9EFrtHKE96XbLLND1a"}',
        id="anthropic-tool-use-history",
    ),
    pytest.param(
        # OpenAI, tool call name in the history: mcp-use/mcp-use#90
        400,
        b"{'message': \"Invalid 'messages[9].tool_calls[0].function.name': string does not match pattern. Expected"
        b" a string that matches the pattern '^[a-zA-Z0-9_-]+$'.\", 'type': 'invalid_request_error', 'param':"
        b" 'messages[9].tool_calls[0].function.name', 'code': 'invalid_value'}",
        id="openai-tool-calls-history",
    ),
]


@pytest.mark.parametrize(("status", "body", "expected"), OVERFLOWS)
def test_overflow(status: int, body: bytes, expected: tuple[object, ...]) -> None:
    r = classify(status, body)
    assert (r.kind, r.window, r.requested, r.input_tokens, r.output_tokens, overshoot(r, None)) == expected
    assert 0 < len(r.message) <= MAX_MESSAGE


@pytest.mark.parametrize(("status", "body"), TOOLS)
def test_tool(status: int, body: bytes) -> None:
    r = classify(status, body)
    assert r == Rejection("tool", message=r.message)
    assert r.message and overshoot(r, 1024) is None


@pytest.mark.parametrize(("status", "body"), OTHERS)
def test_other(status: int, body: bytes) -> None:
    r = classify(status, body)
    assert (r.kind, r.window, overshoot(r, 1024)) == ("other", None, None)


def test_message_is_the_providers_sentence_not_the_wrapper() -> None:
    r = classify(400, [p.values[1] for p in OVERFLOWS if p.id == "openrouter-metadata-raw"][0])
    assert r.message.startswith("This model's maximum context length is 262144 tokens.")
    r = classify(400, [p.values[1] for p in OVERFLOWS if p.id == "gemini-nested"][0])
    assert r.message == "The input token count (1091639) exceeds the maximum number of tokens allowed (1048576)."


def test_tool_mentioning_overflow_is_overflow() -> None:
    # OpenRouter counts tool input inside the overflow: earendil-works/pi#6378
    body = (
        b'{"error":{"message":"This endpoint\'s maximum context length is 262000 tokens. However, you requested'
        b" about 263390 tokens (658 of text input, 732 of tool input, 262000 in the output). Please reduce the"
        b' length of either one, or use the context-compression plugin to compress your prompt automatically.",'
        b'"code":400,"metadata":{"provider_name":null}}}'
    )
    r = classify(400, body)
    assert (r.kind, r.window, r.requested, r.input_tokens, r.output_tokens) == (
        "overflow",
        262000,
        263390,
        1390,
        262000,
    )
    # litellm's fallback chain: a tool refusal first, then the fallback's overflow (the shape of
    # OpenHands/OpenHands#5350, with the tool refusal of evalstate/fast-agent#143)
    chain = _j(
        {
            "error": {
                "message": "litellm.BadRequestError: OpenAIException - Invalid schema for function "
                "'mongodb-list-databases': In context=(), object schema missing properties.\nError doing the "
                "fallback: litellm.BadRequestError: litellm.ContextWindowExceededError: AnthropicError - "
                '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too '
                'long: 209303 tokens > 200000 maximum"}}',
                "type": None,
                "param": "tools[0].function.parameters",
                "code": "400",
            }
        }
    )
    r = classify(400, chain)
    assert (r.kind, r.input_tokens, r.window) == ("overflow", 209303, 200000)


def test_overshoot_adds_the_callers_reserve_only_where_the_provider_counted_none() -> None:
    anthropic = classify(400, b'{"error":{"message":"prompt is too long: 208310 tokens > 200000 maximum"}}')
    assert overshoot(anthropic, None) == 8310
    assert overshoot(anthropic, 8192) == 8310 + 8192  # the window holds the completion too
    gemini = classify(400, b"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).")
    assert overshoot(gemini, 8192) == 151717  # Gemini's limit is on the input alone
    openai = classify(
        400,
        b"maximum context length is 8192 tokens. However, you requested 10152 tokens (6152 in the"
        b" messages, 4000 in the completion).",
    )
    assert overshoot(openai, 100) == 1960  # the provider counted the completion it was sent
    assert overshoot(Rejection("overflow", window=10), 5) is None
    assert overshoot(Rejection("tool", window=10, requested=20), None) is None


def test_a_2xx_is_never_a_rejection() -> None:
    body = [p.values[1] for p in OVERFLOWS if p.id == "anthropic-prompt-too-long"][0]
    for status in (200, 201, 299):
        r = classify(status, body)
        assert (r.kind, r.window, overshoot(r, 1)) == ("other", None, None)
        assert r.message == "prompt is too long: 208310 tokens > 200000 maximum"
    assert classify(300, body).kind == "overflow"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xff\xfe\x00garbage \xc3\x28 not utf-8",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b'{"error":{"message":"' + b"x" * 10 * MAX_BODY + b'"}}',
        b"[]",
        b"null",
        b'"a JSON string"',
        b'{"error":{"message":"\\ud800 lone surrogate","n_ctx":"4096","n_prompt_tokens":true}}',
        b'{"error":{"message":"maximum context length is 1' + b"0" * 5000 + b' tokens"}}',
        b'{"message":"' + b"maximum context length is 4096 tokens. However, you requested about 5000 tokens (" * 900,
        b'{"error":"{\\"error\\":\\"{\\\\\\"x\\\\\\": 1}\\"}"}',
    ],
    ids=lambda body: repr(body[:24]),
)
def test_hostile_bodies_never_raise(body: bytes) -> None:
    for status in (400, 200, 500, -1, 10**30):
        r = classify(status, body)
        assert r.kind in ("overflow", "tool", "other") and len(r.message) <= MAX_MESSAGE
        r.message.encode("utf-8")  # fit for a log or a record


def test_huge_body_is_read_from_a_prefix() -> None:
    body = b'{"error":{"message":"prompt is too long: 300000 tokens > 200000 maximum","pad":"' + b"y" * 4 * MAX_BODY
    r = classify(400, body + b'"}}')
    assert (r.kind, r.input_tokens, r.window) == ("overflow", 300000, 200000)


# Pieces of the wordings above, so that generated bodies reach the rules and the number parsing.
FRAGMENTS = st.sampled_from(
    [
        "maximum context length is ", " tokens. However, you requested ", " tokens (", " in the messages, ",
        " in the completion)", "about ", " of text input, ", " in the output)", "prompt is too long: ", " > ",
        " maximum", "input length and `max_tokens` exceed context limit: ", " + ", "The input token count (",
        ") exceeds the maximum number of tokens allowed (", ")", "at least ", "tools[0]", "tool_choice",
        '{"error":{"message":"', '"}}', '{"n_ctx":', ',"n_prompt_tokens":', "}", "[", "\\", '"', ",",
    ]
)  # fmt: skip
NUMBERS = st.integers(min_value=0, max_value=10**25).map(lambda n: f"{n:,}" if n % 2 else str(n))
BODIES = st.one_of(
    st.binary(max_size=2048),
    st.lists(st.one_of(FRAGMENTS, NUMBERS), max_size=30).map(lambda parts: "".join(parts).encode()),
)


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(), BODIES)
def test_classify_never_raises(status: int, body: bytes) -> None:
    r = classify(status, body)
    assert r.kind in ("overflow", "tool", "other") and len(r.message) <= MAX_MESSAGE
    overshoot(r, 1000)


def test_the_window_learned_holds_the_reply_where_the_limit_is_on_input_alone() -> None:
    from proxy.upstream.classify import window_of

    openai_body = b'{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, you requested'
    openai_body += b' 10152 tokens (6152 in the messages, 4000 in the completion).","code":"context_length_exceeded"}}'
    assert window_of(classify(400, openai_body), 4000) == 8192
    gemini = b"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576)."
    assert window_of(classify(400, gemini), 8192) == 1048576 + 8192  # the input's limit, plus the reply
    assert window_of(classify(400, b'{"error":{"message":"maximum context length is 12 tokens"}}')) is None
    assert window_of(classify(400, b'{"error":{"code":"invalid_value","param":"tools[0].type"}}')) is None
