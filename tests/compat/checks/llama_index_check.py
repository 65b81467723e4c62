"""llama-index's OpenAILike against the gateway: complete (the completions API), chat, stream_chat."""

from __future__ import annotations

from common import BASE, CHAT, run_all
from llama_index.core.llms import ChatMessage
from llama_index.llms.openai_like import OpenAILike


def llm(chat: bool) -> OpenAILike:
    return OpenAILike(
        model=CHAT,
        api_base=f"{BASE}/v1",
        api_key="unused",
        is_chat_model=chat,
        context_window=2048,
        max_tokens=24,
        temperature=0,
    )


def complete() -> str:
    r = llm(False).complete("The capital of France is")
    assert r.text.strip(), r
    return f"{len(r.text)} characters"


def chat() -> str:
    r = llm(True).chat([ChatMessage(role="user", content="Say hello.")])
    assert r.message.content and r.message.content.strip(), r
    return f"{len(r.message.content)} characters"


def stream_chat() -> str:
    parts = [
        c.delta or "" for c in llm(True).stream_chat([ChatMessage(role="user", content="Count to five.")])
    ]
    assert len(parts) > 2 and "".join(parts).strip(), parts
    return f"{len(parts)} deltas"


if __name__ == "__main__":
    run_all("llama-index", {"complete": complete, "chat": chat, "stream_chat": stream_chat}, short=("chat",))
