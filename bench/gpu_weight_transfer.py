"""Seconds per weight sync into a real vLLM server: vLLM's weight transfer against the folder
reload, for the same model, side by side in one run.

What it runs (bench/gpu_weight_transfer.sh is the one command; it checks for a GPU and vllm):

1. the model: a Qwen2 of Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 query / 2 key-value
   heads, MLP 4864, vocabulary 151,936, tied embeddings: 0.49e9 parameters) with random bf16
   weights (seed 0; nothing downloaded), saved with the offline Qwen tokenizer into --out;
2. the server: `vllm serve` on it (the flags of `rltap.engines.launch.vllm_command`, with
   `--weight-transfer-config '{"backend": "ipc"}'`, `--gpu-memory-utilization` --gpu-share,
   `--enforce-eager`), on the GPU this process trains on, so CUDA IPC applies; its log in --out;
3. the trainer's model: the same weights on that GPU, moved by noise before every sync (each
   sync carries new weights);
4. per sync, through one `VLLMEngine(weight_transfer="ipc")`: `update_weights(named_tensors(
   model))` (vLLM's IPC transfer in chunks of --chunk-mb, the whole pause-to-resume), then
   `update_weights(WeightFolder(...))` (save_pretrained into --out/sync, then vLLM's reload from
   it), alternating, --syncs times each;
5. after the last sync of each kind, a check that vLLM serves the trainer's weights: the greedy
   tokens vLLM generates for a fixed prompt, scored by the trainer's model, against the logprobs
   vLLM reported (bf16 on both sides: within a few hundredths).

NCCL needs the trainer and vLLM on different GPUs: with two or more visible, the same runs again
against a second server on GPU 1 with `{"backend": "nccl"}`; with one, a line says it is
skipped.

Printed: one row per path with the median, min and max seconds per sync (the first sync, which
warms vLLM and the transfer up, left out), and the check's largest logprob difference.

Exit status: 0 done; 77 no CUDA GPU or no vllm here (one line says which); 1 a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Any, NamedTuple

from qwen_shapes import QWEN2_0_5B  # bench/ is the script's folder: on sys.path

SKIPPED = 77
PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--syncs", type=int, default=5, help="syncs per path (first is warm-up)")
    parser.add_argument("--chunk-mb", type=int, default=256, help="transfer chunk, MiB")
    parser.add_argument("--gpu-share", type=float, default=0.35, help="vLLM's GPU memory share")
    parser.add_argument(
        "--vllm-bin",
        default=os.environ.get("RLTAP_VLLM_BIN") or shutil.which("vllm") or sys.executable,
        help="the vllm executable, or a Python with vllm (default: $RLTAP_VLLM_BIN, vllm on "
        "PATH, this Python)",
    )
    parser.add_argument("--out", default="runs/gpu-weight-transfer")
    parser.add_argument("--ready-timeout", type=float, default=300.0)
    return parser.parse_args(argv)


def skip_unless_ready() -> None:
    """Exit 77 with one line when there is no CUDA GPU or no vllm in this environment."""
    import torch

    if not torch.cuda.is_available():
        print("bench/gpu_weight_transfer.py: skipped, torch sees no CUDA GPU", file=sys.stderr)
        sys.exit(SKIPPED)
    try:
        import vllm  # noqa: F401  (its trainer-side transfer code runs in this process)
    except ImportError:
        print(
            "bench/gpu_weight_transfer.py: skipped, vllm is not installed in this Python "
            f"({sys.executable}); the trainer side of vLLM's weight transfer needs it",
            file=sys.stderr,
        )
        sys.exit(SKIPPED)


def build_model(out: Path) -> Any:
    """The random Qwen2.5-0.5B-shaped model on the GPU (bf16), saved with a tokenizer in `out`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rltap.testing.models import cached_qwen_tokenizer_dir

    torch.manual_seed(0)
    config = Qwen2Config(**QWEN2_0_5B)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer = cached_qwen_tokenizer_dir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer / name, out / name)
    return model


class Server(NamedTuple):
    process: subprocess.Popen[bytes]
    url: str
    log: IO[bytes]


def start_server(args: argparse.Namespace, model_dir: Path, backend: str, gpu: int) -> Server:
    """`vllm serve` with rltap's flags and `backend`'s transfer on GPU `gpu`."""
    import socket

    from rltap.engines.launch import vllm_command

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    extra = ["--gpu-memory-utilization", str(args.gpu_share), "--enforce-eager"]
    extra += ["--max-model-len", "2048", "--dtype", "bfloat16"]
    command = vllm_command(
        model_dir,
        binary=args.vllm_bin,
        host="127.0.0.1",
        port=port,
        weight_transfer=backend,
        extra_args=extra,
    )
    env = {**os.environ, **command.env}
    env["CUDA_VISIBLE_DEVICES"] = _physical(gpu)
    log = open(model_dir.parent / f"vllm-{backend}.log", "wb")  # noqa: SIM115
    print(f"starting {' '.join(command.argv)} (log: {log.name})", flush=True)
    process = subprocess.Popen(
        command.argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    return Server(process, f"http://127.0.0.1:{port}", log)


def _physical(gpu: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible.split(",")[gpu] if visible else str(gpu)


def wait_ready(server: Server, timeout: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if server.process.poll() is not None:
            tail = Path(server.log.name).read_text(errors="replace")[-3000:]
            sys.exit(f"vLLM exited ({server.process.returncode}) before it was ready:\n{tail}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2) as reply:
                if reply.status == 200:
                    print(f"vLLM ready in {time.monotonic() - started:.0f} s", flush=True)
                    return
        except OSError:
            pass
        time.sleep(1)
    sys.exit(f"vLLM did not become healthy in {timeout:.0f} s; see {server.log.name}")


def stop(server: Server) -> None:
    """End the server's whole process group (the API server and its engine core)."""
    import signal

    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait()
    server.log.close()


def perturb(model: Any, seed: int) -> None:
    import torch

    generator = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            noise = torch.randn(
                parameter.shape, generator=generator, device="cuda", dtype=torch.float32
            )
            parameter.add_((0.01 * noise).to(parameter.dtype))


async def serves_trainer_weights(engine: Any, model: Any) -> float:
    """Largest difference between vLLM's logprobs of its greedy tokens and the trainer's."""
    import torch

    from rltap.record.types import ModelRequest

    reply = await engine.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=16, temperature=0))
    ids = torch.tensor([PROMPT + reply.output_tokens], device="cuda")
    with torch.no_grad():
        logits = model(ids).logits.float()
    logprobs = torch.log_softmax(logits[0, len(PROMPT) - 1 : -1], dim=-1)
    mine = logprobs.gather(1, ids[0, len(PROMPT) :, None])[:, 0].tolist()
    return max(abs(a - b) for a, b in zip(mine, reply.output_logprobs, strict=True))


async def run_syncs(args: argparse.Namespace, url: str, backend: str, model: Any) -> dict[str, Any]:
    """Alternate transfer and folder syncs; seconds of each, and the checks."""
    from rltap.engines.base import WeightFolder, save_weights
    from rltap.engines.vllm import VLLMEngine
    from rltap.engines.vllm_transfer import VLLMWeightTransfer
    from rltap.train.gather import named_tensors

    transfer = VLLMWeightTransfer(backend, chunk_bytes=args.chunk_mb << 20)
    engine = VLLMEngine(url, transfer=transfer)
    folder = Path(args.out) / "sync"
    seconds: dict[str, list[float]] = {backend: [], "folder": []}
    checks: dict[str, float] = {}
    version = 0
    try:
        for number in range(args.syncs):
            for path in (backend, "folder"):
                version += 1
                perturb(model, version)
                source: Any = named_tensors(model)
                if path == "folder":
                    source = WeightFolder(folder, save=lambda out: save_weights(model, out))
                started = time.perf_counter()
                await engine.update_weights(source, version=version)
                seconds[path].append(time.perf_counter() - started)
                print(f"sync {number + 1} {path}: {seconds[path][-1]:.3f} s", flush=True)
                if number == args.syncs - 1:
                    checks[path] = await serves_trainer_weights(engine, model)
    finally:
        await engine.close()
    return {"seconds": seconds, "checks": checks}


def table(results: list[tuple[str, dict[str, Any]]]) -> int:
    print(f"\n{'path':<34}{'median s':>10}{'min s':>9}{'max s':>9}{'max |dlogprob|':>16}")
    failed = 0
    for label, result in results:
        for path, times in result["seconds"].items():
            warm = times[1:] or times
            name = f"{label} {path}" + (" (save + reload)" if path == "folder" else " transfer")
            check = result["checks"].get(path, float("nan"))
            print(
                f"{name:<34}{statistics.median(warm):>10.3f}{min(warm):>9.3f}{max(warm):>9.3f}"
                f"{check:>16.4f}"
            )
            failed += not check <= 0.1
    return failed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    skip_unless_ready()
    import torch

    out = Path(args.out)
    model = build_model(out / "model")
    results = []
    for backend, gpu in (("ipc", 0), ("nccl", 1)):
        if gpu >= torch.cuda.device_count():
            print(
                f"{backend}: skipped, it needs the trainer and vLLM on different GPUs and "
                f"{torch.cuda.device_count()} is visible",
                flush=True,
            )
            continue
        server = start_server(args, out / "model", backend, gpu)
        try:
            wait_ready(server, args.ready_timeout)
            results.append(
                (f"{backend} server", asyncio.run(run_syncs(args, server.url, backend, model)))
            )
        finally:
            stop(server)
    failed = table(results)
    if failed:
        print(f"{failed} path(s) served other weights than the trainer's", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
