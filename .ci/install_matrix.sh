#!/usr/bin/env bash
# Every other install line the README and docs/usage.md give, each in a fresh venv and a fresh
# user cache, running the commands documented beside it (the README's own line is .ci/run's):
#   core only        pip install -e .                 verify, run, audit --zoo
#   [llama]          ... pip install -e ".[llama]"    build-kernels, generate (a tiny GGUF pair)
#   [llama,serve]    ... pip install -e ".[llama,serve]"   serve, one request with openai
# Run from .ci/run, with its venv active (its gguf writes the tiny pair; its kernels build is
# reused through SPEC_DECODE_KERNELS_DIR, so nothing compiles twice). About 4 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d)
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
SPEC_DECODE_KERNELS_DIR=$(python -c 'from spec_decode.backends.llamacpp.build import kernels_dir; print(kernels_dir())')
export SPEC_DECODE_KERNELS_DIR
python .ci/tiny_pair.py "$work/tiny"
pair=(--target "$work/tiny/target.gguf" --draft "$work/tiny/draft.gguf" --threads 1)
base_path=${PATH#"${VIRTUAL_ENV:+$VIRTUAL_ENV/bin:}"}  # the PATH without .ci/run's venv

fresh() {  # a fresh venv and user cache named $1, in use from here on
    echo "== $1: fresh venv (${SECONDS}s so far)"
    PATH=$base_path python3 -m venv "$work/$1"
    export PATH="$work/$1/bin:$base_path" VIRTUAL_ENV="$work/$1"
    export SPEC_DECODE_CACHE="$work/$1-cache"
    python -m pip install --quiet --upgrade pip
}

refuses() {  # the command must exit 2 with a sentence, no traceback
    local status=0
    "$@" > "$work/out" 2>&1 || status=$?
    cat "$work/out"
    if [ "$status" != 2 ] || grep -q Traceback "$work/out"; then
        echo "expected exit 2 and no traceback from: $*" >&2
        return 1
    fi
}

fresh core
pip install --quiet -e "$root"
spec-decode verify
spec-decode run
spec-decode audit --zoo > "$work/zoo"  # exits 0 when every zoo entry gets its expected verdict
tail -n 3 "$work/zoo"
refuses spec-decode generate --prompt hi  # names the [llama] extra's install line

fresh llama
CMAKE_ARGS="-DLLAMA_BUILD=OFF" pip install --quiet -e "$root[llama]"
spec-decode build-kernels  # already built: the cached build, checked for this CPU
spec-decode generate "${pair[@]}" --prompt "write some letters" --max-new-tokens 24 --compare \
    2> "$work/generate"
cat "$work/generate"
grep -q "token sequences identical" "$work/generate"
refuses spec-decode serve "${pair[@]}"  # names the [serve] extra's install line

fresh serve
CMAKE_ARGS="-DLLAMA_BUILD=OFF" pip install --quiet -e "$root[llama,serve]"
spec-decode serve "${pair[@]}" --port 0 2> "$work/serve.log" &
server=$!
for _ in $(seq 240); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*/v1' "$work/serve.log" || true)
    [ -n "$url" ] || ! kill -0 "$server" 2>/dev/null || { sleep 0.5; continue; }
    break
done
cat "$work/serve.log"
[ -n "$url" ] || { echo "serve did not start" >&2; exit 1; }
python - "$url" <<'PY'
import sys

import openai

client = openai.OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0)
reply = client.chat.completions.create(
    model="target", messages=[{"role": "user", "content": "write some letters"}], max_tokens=16
)
print("openai client got:", repr(reply.choices[0].message.content), reply.usage)
assert reply.choices[0].finish_reason in ("length", "stop") and reply.usage.completion_tokens > 0
PY
kill -TERM "$server"
wait "$server"  # a clean shutdown exits 0
server=
echo "== install matrix passed in ${SECONDS}s"
