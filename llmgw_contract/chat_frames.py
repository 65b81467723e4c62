"""Chat-template frames: read a model's rendered prompt back as the gateway's prefix text.

vLLM caches the tokens of the *rendered* prompt (the chat template applied to the messages); the gateway
keys the *messages* (:mod:`llmgw_contract.prefix_chain`). A managing agent that sees a cached block's tokens
(vLLM's KV events) decodes them to text and reads that text back into messages with the model's frames,
learnt once by rendering the template around sentinel contents:

- ``first``: the text before the first (system) message's content, e.g. ``<|im_start|>system\\n``;
- ``openers[role]``: the text before a later user or assistant message's content;
- ``end``: the text after every message's content, e.g. ``<|im_end|>\\n``;
- ``default_system``: the system prompt the template adds when a request has none (SmolLM2's), so that a
  cached prompt that starts with it is keyed both with it and without it.

Templates of that shape (ChatML, Llama 3, Gemma) are read back exactly; :meth:`Frames.learn` checks it on a
sample conversation and returns None for any other template (that model then stays approximate). What is
read from a prompt cut anywhere is a prefix of what the whole prompt reads as, so a cached block's text
gives a prefix of every conversation that continues it. Tool sections read as other text (a request's
``tools`` written into the system turn, an assistant's tool calls, tool results as wrapped user turns): the
keys part from the gateway's where the first of them begins (missed hits, never false ones;
docs/gateway/prefix-index.md, "Tool turns in exact mode"). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from llmgw_contract.prefix_chain import ROLE_END, message_piece

Render = Callable[[list[dict[str, str]]], str]
"""The template applied to messages, without the generation prompt."""

_S = ["\ue000S0\ue001", "\ue000U1\ue001", "\ue000A2\ue001", "\ue000U3\ue001"]
_SAMPLE = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is a KV cache?"},
    {"role": "assistant", "content": "The keys and values of past tokens."},
    {"role": "user", "content": "Why reuse it?"},
]


@dataclass(frozen=True, slots=True)
class Frames:
    first: str
    openers: tuple[tuple[str, str], ...]
    end: str
    lead: str = ""
    """The text before the first user message's opener when a prompt has no system message (and the template
    adds none), e.g. a BOS token."""
    default_system: str | None = None

    @classmethod
    def learn(cls, render: Render) -> Frames | None:
        """The frames of ``render``'s template, or None when its prompts cannot be read back exactly."""
        try:
            frames = cls._probe(render)
        except Exception:  # a template that fails on the probes is one we cannot read back
            return None
        if frames is None or not frames.reads_back(render):
            return None
        return frames

    @classmethod
    def _probe(cls, render: Render) -> Frames | None:
        roles = ("system", "user", "assistant", "user")
        out = render([{"role": r, "content": s} for r, s in zip(roles, _S, strict=True)])
        cuts = [out.find(s) for s in _S]
        if any(c < 0 for c in cuts) or cuts != sorted(cuts):
            return None
        first = out[: cuts[0]]
        mids = [out[cuts[k] + len(_S[k]) : cuts[k + 1]] for k in range(3)]
        end = out[cuts[3] + len(_S[3]) :]
        if not end or not all(m.startswith(end) for m in mids):
            return None
        user, assistant = mids[0][len(end) :], mids[1][len(end) :]
        if mids[2][len(end) :] != user or not user or not assistant:
            return None
        alone = render([{"role": "user", "content": _S[1]}])
        head = alone[: alone.find(user + _S[1])]
        default_system, lead = None, head
        if head.startswith(first) and head.endswith(end) and len(head) >= len(first) + len(end):
            default_system, lead = head[len(first) : len(head) - len(end)], ""
        return cls(first, (("user", user), ("assistant", assistant)), end, lead, default_system)

    def reads_back(self, render: Render) -> bool:
        """Whether the sample conversation's prompt (with and without its system message) reads back as the
        gateway's text of the same messages."""
        for messages in (_SAMPLE, _SAMPLE[1:]):
            want = "".join(message_piece(m["role"], m["content"]) for m in messages)
            if want not in self.read(render(messages)):
                return False
        return True

    def read(self, text: str) -> list[str]:
        """The gateway's prefix text of the prompt ``text`` (maybe cut anywhere): one reading, or two when
        it starts with the template's default system prompt (with it, and without it). A text that is no
        chat prompt reads as itself (a completion's prompt)."""
        if text.startswith(self.first):
            pos, role = len(self.first), "system"
        else:
            opener = self.lead + dict(self.openers)["user"]
            if not text.startswith(opener):
                return [] if opener.startswith(text) or self.first.startswith(text) else [text]
            pos, role = len(opener), "user"
        pieces = self._messages(text, pos, role)
        joined = "".join(pieces)
        default = self.default_system
        if default is not None and pieces and pieces[0] == message_piece("system", default):
            return [joined, joined[len(pieces[0]) :]]
        return [joined]

    def _messages(self, text: str, pos: int, role: str) -> list[str]:
        pieces: list[str] = []
        while True:
            stop = text.find(self.end, pos)
            if stop < 0:
                pieces.append(role + ROLE_END + partial(text[pos:], self.end))
                return pieces
            pieces.append(message_piece(role, text[pos:stop]))
            pos = stop + len(self.end)
            nxt = next(((r, o) for r, o in self.openers if text.startswith(o, pos)), None)
            if nxt is None:
                return pieces
            role, pos = nxt[0], pos + len(nxt[1])


def partial(content: str, end: str) -> str:
    """A cut message's content: without a trailing half character or a trailing start of ``end``."""
    content = content.rstrip("\ufffd")
    for k in range(min(len(end) - 1, len(content)), 0, -1):
        if content.endswith(end[:k]):
            return content[:-k]
    return content


def jinja_render(template: str, special: dict[str, Any]) -> Render:
    """A :data:`Render` of a Jinja chat template, as transformers renders it (sandboxed, trimmed blocks)."""
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    compiled = env.from_string(template)

    def render(messages: Sequence[dict[str, str]]) -> str:
        return compiled.render(messages=list(messages), add_generation_prompt=False, **special)

    return render
