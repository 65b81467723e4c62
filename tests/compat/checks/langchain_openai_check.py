"""langchain-openai against the gateway: invoke, stream, structured output, embeddings, bind_tools."""

from __future__ import annotations

from common import BASE, CHAT, EMBED, EMBED_DIM, run_all
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import BaseModel, Field


def chat(max_tokens: int = 24) -> ChatOpenAI:
    return ChatOpenAI(
        model=CHAT, base_url=f"{BASE}/v1", api_key="unused", max_tokens=max_tokens, temperature=0
    )


def invoke() -> str:
    text = chat().invoke("What is the capital of France?").text
    assert isinstance(text, str) and text.strip(), text
    return f"{len(text)} characters"


def stream() -> str:
    parts = [chunk.text for chunk in chat().stream("Count from one to five.")]
    assert len(parts) > 2 and "".join(parts).strip(), parts
    return f"{len(parts)} chunks adding up to {len(''.join(parts))} characters"


class City(BaseModel):
    name: str = Field(description="the city's name")
    country: str = Field(description="the country it is in")


def structured() -> str:
    city = chat(64).with_structured_output(City, method="json_schema").invoke("Name a city in Italy.")
    assert isinstance(city, City) and city.name and city.country, city
    return f"parsed {city!r}"


def embeddings() -> str:
    emb = OpenAIEmbeddings(
        model=EMBED, base_url=f"{BASE}/v1", api_key="unused", check_embedding_ctx_length=False
    )
    docs = emb.embed_documents(["the cat sat", "on the mat"])
    query = emb.embed_query("a cat")
    assert len(docs) == 2 and all(len(v) == EMBED_DIM for v in [*docs, query]), [len(v) for v in docs]
    return f"2 documents and a query, {EMBED_DIM} dimensions"


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"Sunny in {city}."


def bind_tools() -> str:
    llm = chat(64).bind_tools([get_weather], tool_choice="get_weather")  # a named function: guided decoding
    msg = llm.invoke("What is the weather like in Paris?")
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_weather", msg
    assert isinstance(msg.tool_calls[0]["args"].get("city"), str), msg.tool_calls
    result = get_weather.invoke(msg.tool_calls[0])
    assert "Sunny" in str(result.content)
    auto = chat().bind_tools([get_weather]).invoke("What is the weather like in Paris?")  # the model's choice
    assert auto.text.strip() or all(c["name"] == "get_weather" for c in auto.tool_calls), auto
    return (
        f"called get_weather({msg.tool_calls[0]['args']}); auto answered with {len(auto.tool_calls)} call(s)"
    )


if __name__ == "__main__":
    run_all(
        "langchain-openai",
        {
            "invoke": invoke,
            "stream": stream,
            "structured output": structured,
            "embeddings": embeddings,
            "bind_tools": bind_tools,
        },
        short=("invoke", "bind_tools"),
    )
