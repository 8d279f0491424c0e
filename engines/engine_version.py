"""Engine versions: where a running engine tells its version, how to read it from the answer, and how to
compare versions (``parse_version``, PEP 440 order). Pure; used to gate the engines' flags
(engines.flag_gates), to read what a launched or registered engine runs (console.deployments.watching,
engines.external) and to compare it with what a plan or an export needs."""

import re
from collections.abc import Mapping

from engines.launch import SGLANG_ENGINES

# Where each engine tells its version. vLLM's /version is outside its key check (that covers /v1,
# /v2, /inference: vllm/entrypoints/openai/cli_args.py); SGLang's needs "Authorization: Bearer KEY"
# (only /health*, /ready* and /metrics* skip it: sglang/srt/utils/auth.py). SGLang serves
# /get_server_info from 0.4.0 and /server_info from 0.5.6, the old one still there (deprecated) in 0.5.23.
VERSION_PATHS = {"vllm": ("/version",), "sglang": ("/server_info", "/get_server_info")}
VLLM_LIKE = frozenset({"vllm", "vllm-cpu", "simulator"})  # engines that answer GET /version as vLLM does


_VERSION = re.compile(
    r"v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|alpha|b|beta|rc|c|pre|preview)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?post[-_.]?(?P<post_n>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev_n>\d*))?"
    r"(?:\+[0-9a-z.]+)?",
    re.IGNORECASE,
)
_PRE_RANK = {"a": -3, "alpha": -3, "b": -2, "beta": -2, "rc": -1, "c": -1, "pre": -1, "preview": -1}


def parse_version(text: str) -> tuple[int, ...]:
    """A sort key for an engine version: "0.11.2", "v0.5.3rc0", "0.4.10.post2", "0.11.1.dev5+g1a2b".

    Nine integers in PEP 440 order: the release padded to four numbers; the pre-release rank (a −3,
    b −2, rc −1, none 0, −4 for a bare .devN) and number; the post-release number plus one (0 for
    none); −1 and the dev number for a dev release (0 0 otherwise). A local "+..." part is ignored.
    Raises ValueError for text that is not such a version, or has more than four release numbers.
    """
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"Not an engine version: {text!r} (expected something like 0.11.2 or 0.5.3rc0).")
    release = [int(part) for part in match["release"].split(".")]
    if len(release) > 4:
        raise ValueError(f"Not an engine version: {text!r} has more than four release numbers.")
    pre, post, dev = match["pre"], match["post_n"], match["dev_n"]
    pre_rank = _PRE_RANK[pre.lower()] if pre else (-4 if dev is not None and post is None else 0)
    return (
        *release,
        *[0] * (4 - len(release)),
        pre_rank,
        int(match["pre_n"] or 0),
        int(post or 0) + 1 if post is not None else 0,
        *((-1, int(dev or 0)) if dev is not None else (0, 0)),
    )


def version_from_engine(engine: str, body: Mapping[str, object]) -> str:
    """The version string in a running engine's answer: vLLM's ``GET /version`` is ``{"version": ...}``;
    SGLang's ``GET /server_info`` (0.5.6+) or ``GET /get_server_info`` (0.4.0+) carries it as the
    top-level ``version`` beside its server arguments (python/sglang/srt/entrypoints/http_server.py).
    That body echoes the server arguments, the API key among them: never log it.

    ``engine`` is "vllm" (or "vllm-cpu" / "simulator", which answer as vLLM does) or "sglang" (or
    "sglang-cpu"; 0.5.15.post1 on CPU answers ``"version": "0.5.15.post1"``). Raises ValueError for another
    engine, a body without a string version, or a version parse_version refuses.
    """
    if engine not in VLLM_LIKE and engine not in SGLANG_ENGINES:
        raise ValueError(f"No version reader for engine {engine!r}.")
    version = body.get("version") if isinstance(body, Mapping) else None
    if not isinstance(version, str) or not version.strip():
        where = VERSION_PATHS["sglang" if engine in SGLANG_ENGINES else "vllm"]
        raise ValueError(f"The {engine} answer from {' or '.join(where)} has no version string.")
    parse_version(version)
    return version.strip()
