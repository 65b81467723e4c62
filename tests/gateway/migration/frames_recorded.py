"""Stream frames as vLLM 0.32 writes them (``model_dump_json(exclude_unset=True)``), with
``return_token_ids``: a chat stream and a completions stream of SmolLM2-135M-Instruct, and a chat stream
whose tokens end inside UTF-8 characters (vLLM holds their text back until the character completes)."""

from __future__ import annotations

CHAT_ID = "chatcmpl-9d1c"
CHAT = [
    b'data: {"id":"chatcmpl-9d1c","object":"chat.completion.chunk","created":1764870000,"model":"smollm2",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],'
    b'"prompt_token_ids":[1,9690,198,2683,359,253,5356,1]}\n\n',
    b'data: {"id":"chatcmpl-9d1c","object":"chat.completion.chunk","created":1764870000,"model":"smollm2",'
    b'"choices":[{"index":0,"delta":{"content":"The"},"logprobs":null,"finish_reason":null,"token_ids":[504]}]}'
    b"\n\n",
    b'data: {"id":"chatcmpl-9d1c","object":"chat.completion.chunk","created":1764870000,"model":"smollm2",'
    b'"choices":[{"index":0,"delta":{"content":" sky"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":[6153]}]}'
    b"\n\n",
    b'data: {"id":"chatcmpl-9d1c","object":"chat.completion.chunk","created":1764870000,"model":"smollm2",'
    b'"choices":[{"index":0,"delta":{"content":" is"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":[314]}]}'
    b"\n\n",
    b'data: {"id":"chatcmpl-9d1c","object":"chat.completion.chunk","created":1764870000,"model":"smollm2",'
    b'"choices":[{"index":0,"delta":{"content":" blue"},"logprobs":null,"finish_reason":"length",'
    b'"stop_reason":null,"token_ids":[3789]}]}\n\n',
    b'data: {"id":"chatcmpl-9d1c","object":"chat.completion.chunk","created":1764870000,"model":"smollm2",'
    b'"choices":[],"usage":{"prompt_tokens":8,"total_tokens":12,"completion_tokens":4}}\n\n',
    b"data: [DONE]\n\n",
]
# The same frames as a client that did not ask for token ids gets them from vLLM.
CHAT_PLAIN_FIRST = CHAT[0].replace(
    b'"prompt_token_ids":[1,9690,198,2683,359,253,5356,1]', b'"prompt_token_ids":null'
)

COMPLETION = [
    b'data: {"id":"cmpl-77aa","object":"text_completion","created":1764870001,"model":"smollm2",'
    b'"choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":null,"stop_reason":null,'
    b'"prompt_token_ids":[504,3575,282,4649,314],"token_ids":[7042]}]}\n\n',
    b'data: {"id":"cmpl-77aa","object":"text_completion","created":1764870001,"model":"smollm2",'
    b'"choices":[{"index":0,"text":".","logprobs":null,"finish_reason":null,"stop_reason":null,'
    b'"prompt_token_ids":null,"token_ids":[30]}]}\n\n',
]

# "Hello 日本" then a token that holds half of 語 (text held back), then the token completing it.
UTF8 = [
    b'data: {"id":"chatcmpl-u8","object":"chat.completion.chunk","created":5,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],'
    b'"prompt_token_ids":[1,2,3]}\n\n',
    b'data: {"id":"chatcmpl-u8","object":"chat.completion.chunk","created":5,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"Hello \\u65e5\\u672c"},"logprobs":null,"finish_reason":null,'
    b'"token_ids":[19556,17097,241,115,40993]}]}\n\n',
    b'data: {"id":"chatcmpl-u8","object":"chat.completion.chunk","created":5,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null,"token_ids":[179]}]}\n\n',
]
