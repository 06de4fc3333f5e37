#!/usr/bin/env bash
# Tree packing on a CUDA GPU: bench/tree_packing.py's table (individual vs concat vs tree) with a
# Qwen2.5-0.5B-sized Qwen2 of random weights, in under 5 minutes. Not part of `make test`.
# `rltap.train.packed_logprobs` builds a FlexAttention BlockMask from the pack's intervals where
# FlexAttention runs (CUDA) and a dense boolean mask for SDPA elsewhere; the bench's
# `--attention` runs the tree both ways, next to the individual forwards.
#
# Run: bench/tree_packing_gpu.sh     (PYTHON=... to use another interpreter than .venv's,
#                                     one with a CUDA build of torch)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    torch_build=$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "none")
    echo "bench/tree_packing_gpu.sh: no CUDA GPU here (torch $torch_build with" \
        "torch.cuda.is_available() false); run it on a machine with an NVIDIA GPU and a CUDA" \
        "build of torch (PYTHON=/path/to/python), or run the CPU bench:" \
        ".venv/bin/python bench/tree_packing.py" >&2
    exit 2
fi
exec timeout 300 "$PYTHON" bench/tree_packing.py --models qwen0.5b --device cuda \
    --attention flex_attention,sdpa --repeats 3 "$@"
