"""llguidance's view of a Hugging Face tokenizer, built once per process for each tokenizer.

Building it walks the whole vocabulary (about 2.6 s for Qwen's 151k tokens), and two places need
it: the proxy's grammar check (`rltap.chat.constraints`) and the embedded engines' matchers
(`rltap.engines._grammar`). They share one. Its vocabulary is the tokenizer's own
(`len(tokenizer)`); an engine whose logits are wider never allows the padded rows.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Any

import llguidance

__all__ = ["llguidance_tokenizer"]

# Tokenizers loaded from the same folder are the same tokenizer (tests and rollouts start many
# engines and renderers over one model); one built in memory is keyed by the object itself.
_BY_FOLDER: dict[tuple[str, int], llguidance.LLTokenizer] = {}
_BY_OBJECT: weakref.WeakKeyDictionary[Any, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def llguidance_tokenizer(hf_tokenizer: Any) -> llguidance.LLTokenizer:
    """The llguidance tokenizer of `hf_tokenizer` (a fast tokenizer; a slow one is a
    ValueError, as llguidance raises it). Safe from any thread; the first call builds it."""
    folder = str(getattr(hf_tokenizer, "name_or_path", "") or "")
    key = None
    if folder and Path(folder).is_dir():
        key = (str(Path(folder).resolve()), len(hf_tokenizer))
    with _LOCK:
        built = _BY_FOLDER.get(key) if key is not None else _BY_OBJECT.get(hf_tokenizer)
        if built is None:
            import llguidance.hf

            built = llguidance.hf.from_tokenizer(hf_tokenizer)
            if key is not None:
                _BY_FOLDER[key] = built
            else:
                _BY_OBJECT[hf_tokenizer] = built
        return built
