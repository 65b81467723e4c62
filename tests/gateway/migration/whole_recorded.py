"""vLLM 0.32's answers to the same requests streamed and whole, recorded from a real vLLM CPU replica of
SmolLM2-135M-Instruct (served as ``smollm2``, temperature 0, 2026-12-05): each case's stream with
``return_token_ids`` and ``stream_options.include_usage`` (as the gateway asks it for a non-streamed request
that may move), the plain stream, and the non-streamed answers without and with ``return_token_ids``.
Requests: chat "Name three colours." and completion "The capital of France is" (``max_tokens`` 12: finish
``length``), chat "Say hi." (``max_tokens`` 64: finish ``stop`` on the EOS token), and the completion with
``stop_token_ids`` [30] (finish ``stop``, ``stop_reason`` 30)."""

from __future__ import annotations

CHAT_STREAM: list[bytes] = [
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"role":"assistant","content":""},"log'
        b'probs":null,"finish_reason":null}],"prompt_token_ids":[1,9690,198,2683,359,253,5356,5646,1'
        b"1173,3365,3511,308,34519,28,7018,411,407,19712,8182,2,198,1,4093,198,5820,1296,14797,30,2,"
        b'198,1,520,9531,198],"prompt_text":null}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":"1"},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":[33]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":[30]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":" Red"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":[3950]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":":"},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":[42]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":" This"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[669]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":" is"},"logprobs":null,"fin'
        b'ish_reason":null,"token_ids":[314]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":[260]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":" most"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[768]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":" obvious"},"logprobs":null'
        b',"finish_reason":null,"token_ids":[5452]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":" colour"},"logprobs":null,'
        b'"finish_reason":null,"token_ids":[7302]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":","},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":[28]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[{"index":0,"delta":{"content":" but"},"logprobs":null,"fi'
        b'nish_reason":"length","stop_reason":null,"token_ids":[564]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-939b496917b81625","object":"chat.completion.chunk","created":1796432'
        b'557,"model":"smollm2","choices":[],"usage":{"prompt_tokens":34,"total_tokens":46,"completi'
        b'on_tokens":12},"system_fingerprint":"vllm-0.32.0-e3de43f0"}\n\n'
    ),
    (b"data: [DONE]\n\n"),
]
CHAT_PLAIN_STREAM: list[bytes] = [
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"role":"assistant","content":""},"log'
        b'probs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":"1"},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":" Red"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":":"},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":" This"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":" is"},"logprobs":null,"fin'
        b'ish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":" most"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":" obvious"},"logprobs":null'
        b',"finish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":" colour"},"logprobs":null,'
        b'"finish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":","},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a4e8077d2e9fb9be","object":"chat.completion.chunk","created":1796432'
        b'558,"model":"smollm2","choices":[{"index":0,"delta":{"content":" but"},"logprobs":null,"fi'
        b'nish_reason":"length","stop_reason":null,"token_ids":null}],"system_fingerprint":"vllm-0.3'
        b'2.0-e3de43f0"}\n\n'
    ),
    (b"data: [DONE]\n\n"),
]
CHAT_WHOLE = (
    b'{"id":"chatcmpl-b5ad6bbe496df4d7","object":"chat.completion","created":1796432557,"model":'
    b'"smollm2","choices":[{"index":0,"message":{"role":"assistant","content":"1. Red: This is t'
    b'he most obvious colour, but","refusal":null,"annotations":null,"audio":null,"function_call'
    b'":null,"reasoning":null},"logprobs":null,"finish_reason":"length","stop_reason":null,"toke'
    b'n_ids":null,"routed_experts":null}],"service_tier":null,"system_fingerprint":"vllm-0.32.0-'
    b'e3de43f0","usage":{"prompt_tokens":34,"total_tokens":46,"completion_tokens":12,"prompt_tok'
    b'ens_details":null,"completion_tokens_details":null},"prompt_logprobs":null,"prompt_token_i'
    b'ds":null,"prompt_text":null,"kv_transfer_params":null,"ec_transfer_params":null,"metrics":'
    b"null}"
)
CHAT_WHOLE_IDS = (
    b'{"id":"chatcmpl-96eb5e8a814c22e8","object":"chat.completion","created":1796432557,"model":'
    b'"smollm2","choices":[{"index":0,"message":{"role":"assistant","content":"1. Red: This is t'
    b'he most obvious colour, but","refusal":null,"annotations":null,"audio":null,"function_call'
    b'":null,"reasoning":null},"logprobs":null,"finish_reason":"length","stop_reason":null,"toke'
    b'n_ids":[33,30,3950,42,669,314,260,768,5452,7302,28,564],"routed_experts":null}],"service_t'
    b'ier":null,"system_fingerprint":"vllm-0.32.0-e3de43f0","usage":{"prompt_tokens":34,"total_t'
    b'okens":46,"completion_tokens":12,"prompt_tokens_details":null,"completion_tokens_details":'
    b'null},"prompt_logprobs":null,"prompt_token_ids":[1,9690,198,2683,359,253,5356,5646,11173,3'
    b"365,3511,308,34519,28,7018,411,407,19712,8182,2,198,1,4093,198,5820,1296,14797,30,2,198,1,"
    b'520,9531,198],"prompt_text":null,"kv_transfer_params":null,"ec_transfer_params":null,"metr'
    b'ics":null}'
)

COMPLETION_STREAM: list[bytes] = [
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":null,"st'
        b'op_reason":null,"prompt_token_ids":[504,3575,282,4649,314],"token_ids":[7042]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":".","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":[30]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"\\n","logprobs":null,"finish_reason":null,"stop_r'
        b'eason":null,"prompt_token_ids":null,"token_ids":[198]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"\\n","logprobs":null,"finish_reason":null,"stop_r'
        b'eason":null,"prompt_token_ids":null,"token_ids":[198]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"The","logprobs":null,"finish_reason":null,"stop_'
        b'reason":null,"prompt_token_ids":null,"token_ids":[504]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":" answer","logprobs":null,"finish_reason":null,"s'
        b'top_reason":null,"prompt_token_ids":null,"token_ids":[2988]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":" is","logprobs":null,"finish_reason":null,"stop_'
        b'reason":null,"prompt_token_ids":null,"token_ids":[314]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":":","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":[42]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":" ","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":[216]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"2","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":[34]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"0","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":[32]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"1","logprobs":null,"finish_reason":"length","sto'
        b'p_reason":null,"prompt_token_ids":null,"token_ids":[33]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-93591acd58162379","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[],"usage":{"prompt_tokens":5,"total_tokens":17,"completion_tokens":'
        b'12},"system_fingerprint":"vllm-0.32.0-e3de43f0"}\n\n'
    ),
    (b"data: [DONE]\n\n"),
]
COMPLETION_PLAIN_STREAM: list[bytes] = [
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":null,"st'
        b'op_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":".","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"\\n","logprobs":null,"finish_reason":null,"stop_r'
        b'eason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"\\n","logprobs":null,"finish_reason":null,"stop_r'
        b'eason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"The","logprobs":null,"finish_reason":null,"stop_'
        b'reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":" answer","logprobs":null,"finish_reason":null,"s'
        b'top_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":" is","logprobs":null,"finish_reason":null,"stop_'
        b'reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":":","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":" ","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"2","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"0","logprobs":null,"finish_reason":null,"stop_re'
        b'ason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-9141578d77fef470","object":"text_completion","created":1796432559,"model'
        b'":"smollm2","choices":[{"index":0,"text":"1","logprobs":null,"finish_reason":"length","sto'
        b'p_reason":null,"prompt_token_ids":null,"token_ids":null}],"system_fingerprint":"vllm-0.32.'
        b'0-e3de43f0"}\n\n'
    ),
    (b"data: [DONE]\n\n"),
]
COMPLETION_WHOLE = (
    b'{"id":"cmpl-beb7df4983af89b6","object":"text_completion","created":1796432558,"model":"smo'
    b'llm2","choices":[{"index":0,"text":" Paris.\\n\\nThe answer is: 201","logprobs":null,"finish'
    b'_reason":"length","stop_reason":null,"token_ids":null,"prompt_logprobs":null,"prompt_token'
    b'_ids":null,"routed_experts":null}],"service_tier":null,"system_fingerprint":"vllm-0.32.0-e'
    b'3de43f0","usage":{"prompt_tokens":5,"total_tokens":17,"completion_tokens":12,"prompt_token'
    b's_details":null,"completion_tokens_details":null},"kv_transfer_params":null,"ec_transfer_p'
    b'arams":null,"metrics":null}'
)
COMPLETION_WHOLE_IDS = (
    b'{"id":"cmpl-aaff2411a5c96527","object":"text_completion","created":1796432558,"model":"smo'
    b'llm2","choices":[{"index":0,"text":" Paris.\\n\\nThe answer is: 201","logprobs":null,"finish'
    b'_reason":"length","stop_reason":null,"token_ids":[7042,30,198,198,504,2988,314,42,216,34,3'
    b'2,33],"prompt_logprobs":null,"prompt_token_ids":[504,3575,282,4649,314],"routed_experts":n'
    b'ull}],"service_tier":null,"system_fingerprint":"vllm-0.32.0-e3de43f0","usage":{"prompt_tok'
    b'ens":5,"total_tokens":17,"completion_tokens":12,"prompt_tokens_details":null,"completion_t'
    b'okens_details":null},"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}'
)

CHAT_EOS_STREAM: list[bytes] = [
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"role":"assistant","content":""},"log'
        b'probs":null,"finish_reason":null}],"prompt_token_ids":[1,9690,198,2683,359,253,5356,5646,1'
        b"1173,3365,3511,308,34519,28,7018,411,407,19712,8182,2,198,1,4093,198,36218,15876,30,2,198,"
        b'1,520,9531,198],"prompt_text":null}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[19556]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" there"},"logprobs":null,"'
        b'finish_reason":null,"token_ids":[665]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":[17]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" I"},"logprobs":null,"fini'
        b'sh_reason":null,"token_ids":[339]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":"\'m"},"logprobs":null,"fini'
        b'sh_reason":null,"token_ids":[5248]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" here"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[1535]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" to"},"logprobs":null,"fin'
        b'ish_reason":null,"token_ids":[288]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" help"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[724]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" with"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[351]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" any"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":[750]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" kind"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[1942]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" of"},"logprobs":null,"fin'
        b'ish_reason":null,"token_ids":[282]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" creative"},"logprobs":nul'
        b'l,"finish_reason":null,"token_ids":[4833]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" writing"},"logprobs":null'
        b',"finish_reason":null,"token_ids":[2385]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" project"},"logprobs":null'
        b',"finish_reason":null,"token_ids":[1391]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":[30]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" What"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[1812]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" can"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":[416]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" I"},"logprobs":null,"fini'
        b'sh_reason":null,"token_ids":[339]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" help"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[724]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" you"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":[346]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":" with"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":[351]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":"?"},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":[47]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish'
        b'_reason":"stop","stop_reason":null,"token_ids":[2]}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-94561b1aca2aaa5b","object":"chat.completion.chunk","created":1796432'
        b'561,"model":"smollm2","choices":[],"usage":{"prompt_tokens":33,"total_tokens":57,"completi'
        b'on_tokens":24},"system_fingerprint":"vllm-0.32.0-e3de43f0"}\n\n'
    ),
    (b"data: [DONE]\n\n"),
]
CHAT_EOS_PLAIN_STREAM: list[bytes] = [
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"role":"assistant","content":""},"log'
        b'probs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" there"},"logprobs":null,"'
        b'finish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" I"},"logprobs":null,"fini'
        b'sh_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":"\'m"},"logprobs":null,"fini'
        b'sh_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" here"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" to"},"logprobs":null,"fin'
        b'ish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" help"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" with"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" any"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" kind"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" of"},"logprobs":null,"fin'
        b'ish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" creative"},"logprobs":nul'
        b'l,"finish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" writing"},"logprobs":null'
        b',"finish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" project"},"logprobs":null'
        b',"finish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" What"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" can"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" I"},"logprobs":null,"fini'
        b'sh_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" help"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" you"},"logprobs":null,"fi'
        b'nish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":" with"},"logprobs":null,"f'
        b'inish_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":"?"},"logprobs":null,"finis'
        b'h_reason":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"chatcmpl-a875b887680b2012","object":"chat.completion.chunk","created":1796432'
        b'562,"model":"smollm2","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish'
        b'_reason":"stop","stop_reason":null,"token_ids":null}],"system_fingerprint":"vllm-0.32.0-e3'
        b'de43f0"}\n\n'
    ),
    (b"data: [DONE]\n\n"),
]
CHAT_EOS_WHOLE = (
    b'{"id":"chatcmpl-abf68735e100ca21","object":"chat.completion","created":1796432560,"model":'
    b'"smollm2","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there! I\'m '
    b'here to help with any kind of creative writing project. What can I help you with?","refusa'
    b'l":null,"annotations":null,"audio":null,"function_call":null,"reasoning":null},"logprobs":'
    b'null,"finish_reason":"stop","stop_reason":null,"token_ids":null,"routed_experts":null}],"s'
    b'ervice_tier":null,"system_fingerprint":"vllm-0.32.0-e3de43f0","usage":{"prompt_tokens":33,'
    b'"total_tokens":57,"completion_tokens":24,"prompt_tokens_details":null,"completion_tokens_d'
    b'etails":null},"prompt_logprobs":null,"prompt_token_ids":null,"prompt_text":null,"kv_transf'
    b'er_params":null,"ec_transfer_params":null,"metrics":null}'
)
CHAT_EOS_WHOLE_IDS = (
    b'{"id":"chatcmpl-bfbbb7b3d99acecd","object":"chat.completion","created":1796432560,"model":'
    b'"smollm2","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there! I\'m '
    b'here to help with any kind of creative writing project. What can I help you with?","refusa'
    b'l":null,"annotations":null,"audio":null,"function_call":null,"reasoning":null},"logprobs":'
    b'null,"finish_reason":"stop","stop_reason":null,"token_ids":[19556,665,17,339,5248,1535,288'
    b',724,351,750,1942,282,4833,2385,1391,30,1812,416,339,724,346,351,47,2],"routed_experts":nu'
    b'll}],"service_tier":null,"system_fingerprint":"vllm-0.32.0-e3de43f0","usage":{"prompt_toke'
    b'ns":33,"total_tokens":57,"completion_tokens":24,"prompt_tokens_details":null,"completion_t'
    b'okens_details":null},"prompt_logprobs":null,"prompt_token_ids":[1,9690,198,2683,359,253,53'
    b"56,5646,11173,3365,3511,308,34519,28,7018,411,407,19712,8182,2,198,1,4093,198,36218,15876,"
    b'30,2,198,1,520,9531,198],"prompt_text":null,"kv_transfer_params":null,"ec_transfer_params"'
    b':null,"metrics":null}'
)

COMPLETION_STOP_ID_STREAM: list[bytes] = [
    (
        b'data: {"id":"cmpl-8c9adf21fd33db31","object":"text_completion","created":1796432563,"model'
        b'":"smollm2","choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":null,"st'
        b'op_reason":null,"prompt_token_ids":[504,3575,282,4649,314],"token_ids":[7042]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-8c9adf21fd33db31","object":"text_completion","created":1796432563,"model'
        b'":"smollm2","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_r'
        b'eason":30,"prompt_token_ids":null,"token_ids":[30]}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-8c9adf21fd33db31","object":"text_completion","created":1796432563,"model'
        b'":"smollm2","choices":[],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2'
        b'},"system_fingerprint":"vllm-0.32.0-e3de43f0"}\n\n'
    ),
    (b"data: [DONE]\n\n"),
]
COMPLETION_STOP_ID_PLAIN_STREAM: list[bytes] = [
    (
        b'data: {"id":"cmpl-967bdef14ed7c9e1","object":"text_completion","created":1796432563,"model'
        b'":"smollm2","choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":null,"st'
        b'op_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    ),
    (
        b'data: {"id":"cmpl-967bdef14ed7c9e1","object":"text_completion","created":1796432563,"model'
        b'":"smollm2","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_r'
        b'eason":30,"prompt_token_ids":null,"token_ids":null}],"system_fingerprint":"vllm-0.32.0-e3d'
        b'e43f0"}\n\n'
    ),
    (b"data: [DONE]\n\n"),
]
COMPLETION_STOP_ID_WHOLE = (
    b'{"id":"cmpl-af58d3eab7398050","object":"text_completion","created":1796432563,"model":"smo'
    b'llm2","choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":"stop","stop_r'
    b'eason":30,"token_ids":null,"prompt_logprobs":null,"prompt_token_ids":null,"routed_experts"'
    b':null}],"service_tier":null,"system_fingerprint":"vllm-0.32.0-e3de43f0","usage":{"prompt_t'
    b'okens":5,"total_tokens":7,"completion_tokens":2,"prompt_tokens_details":null,"completion_t'
    b'okens_details":null},"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}'
)
COMPLETION_STOP_ID_WHOLE_IDS = (
    b'{"id":"cmpl-ad4cf2f73e2f9493","object":"text_completion","created":1796432563,"model":"smo'
    b'llm2","choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":"stop","stop_r'
    b'eason":30,"token_ids":[7042,30],"prompt_logprobs":null,"prompt_token_ids":[504,3575,282,46'
    b'49,314],"routed_experts":null}],"service_tier":null,"system_fingerprint":"vllm-0.32.0-e3de'
    b'43f0","usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2,"prompt_tokens_det'
    b'ails":null,"completion_tokens_details":null},"kv_transfer_params":null,"ec_transfer_params'
    b'":null,"metrics":null}'
)
