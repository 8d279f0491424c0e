"""Load profiles of the capacity check and the prompts they send.

Three profiles (the field guide's traffic kinds):

- ``chat``: short prompts and answers, latency first; swept at 1, 10 and 50 concurrent users.
- ``coding-agent``: long prompts sharing a long prefix (the field guide's agent traffic: a median prompt of
  59K tokens, p90 125K, about two thirds of its tokens served from the prefix cache), scaled down to the
  deployment's ``max_model_len`` so that prompt plus answer fit; swept at 1, 4 and 10 sessions.
- ``batch``: medium prompts, long answers, throughput first; swept at 8, 32 and 64.

With the shared prefix on, every request's prompt starts with the same text (a system prompt, a
repository) of the profile's prefix share, so the engine's prefix cache can serve it; off, every prompt
is different from its first token. Prompts are words drawn from ``WORDS`` by a seeded generator; their
length in tokens is set through ``tokens_per_word`` and ``overhead_tokens``, which the check measures on
the deployment's own tokenizer before it starts (two calibration requests: the engine's usage counts).
"""

import random
from dataclasses import dataclass

CONCURRENCY, RATE = "concurrency", "rate"
MODES = (CONCURRENCY, RATE)
TEMPLATE_MARGIN_TOKENS = 64  # room left in max_model_len for the chat template's own tokens


@dataclass(frozen=True)
class Profile:
    """A kind of traffic: prompt and answer lengths (tokens), the share of the prompt that is a shared
    prefix when that is on (0–1), the default sweep per mode, and what it stands for, in words."""

    name: str
    label: str
    prompt_tokens: int
    output_tokens: int
    prefix_share: float
    levels: dict[str, tuple[float, ...]]
    what: str


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "chat",
            "Chat",
            256,
            128,
            0.5,
            {CONCURRENCY: (1, 10, 50), RATE: (0.5, 1, 2)},
            "short prompts and answers, latency first",
        ),
        Profile(
            "coding-agent",
            "Coding agent",
            59_000,
            256,
            2 / 3,
            {CONCURRENCY: (1, 4, 10), RATE: (0.1, 0.2, 0.5)},
            "long prompts, a long shared prefix (median 59K tokens, two thirds cached), scaled to max_model_len",
        ),
        Profile(
            "batch",
            "Batch",
            512,
            512,
            0.25,
            {CONCURRENCY: (8, 32, 64), RATE: (1, 2, 4)},
            "medium prompts, long answers, throughput first",
        ),
    )
}


@dataclass(frozen=True)
class Shape:
    """The requests of one check: prompt and answer tokens, and the shared prefix's tokens (0: off)."""

    prompt_tokens: int
    output_tokens: int
    prefix_tokens: int

    @property
    def session_tokens(self) -> int:
        """Tokens one request holds in the KV cache at its end: prompt plus answer."""
        return self.prompt_tokens + self.output_tokens


def shape_for(
    profile: Profile, max_model_len: int, shared_prefix: bool, prompt_tokens: int = 0, output_tokens: int = 0
) -> Shape:
    """The profile's lengths within ``max_model_len`` (tokens): the answer first, the prompt what is left,
    less TEMPLATE_MARGIN_TOKENS for the chat template; ``prompt_tokens`` and ``output_tokens`` (0: the
    profile's) fix them instead, e.g. sessions of one length. Raises ValueError when they do not fit."""
    room = max_model_len - TEMPLATE_MARGIN_TOKENS
    output = output_tokens or min(profile.output_tokens, room // 4)
    prompt = prompt_tokens or min(profile.prompt_tokens, room - output)
    if output < 1 or prompt < 16:
        raise ValueError(f"max_model_len {max_model_len:,} leaves no room for a {profile.label.lower()} request.")
    if prompt + output > max_model_len:
        raise ValueError(f"{prompt:,} prompt + {output:,} answer tokens do not fit max_model_len {max_model_len:,}.")
    prefix = int(prompt * profile.prefix_share) if shared_prefix else 0
    return Shape(prompt, output, prefix)


# Common English words, most of them one token in the BPE vocabularies of current models.
WORDS = (
    "the of and to in is was for on are with as be at by this have from or had not but what all were when "
    "we there can an your which their said if do will each about how up out them then she many some so "
    "these would other into has more her two like him see time could no make than first been its who now "
    "people my made over did down only way find use may water long little very after words called just "
    "where most know get through back much before go good new write our used me man too any day same "
    "right look think also around another came come work three word must because does part even place "
    "well such here take why things help put years different away again off went old number great tell "
    "men say small every found still between name should home big give air line set own under read last "
    "never us left end along while might next sound below saw something thought both few those always "
    "looked show large often together asked house world going want school important until form food keep"
).split()


def words(tokens: float, seed: str, tokens_per_word: float) -> str:
    """About ``tokens`` tokens of words, the same for the same ``seed`` (tokens_per_word > 0)."""
    rng = random.Random(seed)  # noqa: S311 - reproducible text, not a secret
    count = max(1, round(tokens / tokens_per_word))
    return " ".join(rng.choice(WORDS) for _ in range(count))


def prompt_text(shape: Shape, index: int, run_seed: str, tokens_per_word: float = 1.0, overhead: float = 0.0) -> str:
    """Request ``index``'s user message: the shared prefix (when on), then its own words, numbered first
    so that no two requests share a prefix by chance. ``overhead`` tokens (the chat template's) are left out."""
    own = max(8.0, shape.prompt_tokens - shape.prefix_tokens - overhead)
    head = words(shape.prefix_tokens, f"{run_seed}:prefix", tokens_per_word) + "\n\n" if shape.prefix_tokens else ""
    return f"{head}Request {index}: " + words(own, f"{run_seed}:{index}", tokens_per_word)


def calibration_texts() -> tuple[str, str, int]:
    """Two prompts whose engine-counted difference gives tokens per word: one word, then that word and
    200 more; returns (short, long, extra words)."""
    extra = 200
    return "Hello", "Hello " + words(extra, "calibration", 1.0), extra
