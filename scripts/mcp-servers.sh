#!/usr/bin/env bash
# Installs the real MCP servers tests/mcp_real.rs runs, from the package
# registries, into a cache outside the repository:
#   PyPI: mcp-server-time, mcp-server-git  (a venv of /usr/bin/python3)
#   npm:  @modelcontextprotocol/server-filesystem,
#         @modelcontextprotocol/server-everything
# The cache is $LATCHCLAW_MCP_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/latchclaw/mcp-servers;
# `scripts/mcp-servers.sh dir` prints it. Installing again is quick (pip and
# npm find what is there). Without a registry, a runtime or a network, it
# says so and exits 0: the tests that need a server then skip, saying why.
set -uo pipefail

cache="${LATCHCLAW_MCP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/latchclaw/mcp-servers}"
if [ "${1:-}" = dir ]; then
    echo "$cache"
    exit 0
fi
mkdir -p "$cache"
note() { echo "mcp-servers: $*" >&2; }

# Python: a venv of the system's python (its interpreter is under /usr,
# which the sandbox shows; a pyenv or home-directory python is not).
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -m venv --help >/dev/null 2>&1; then
    if [ ! -x "$cache/py/bin/python" ]; then
        "$py" -m venv "$cache/py" || note "cannot make a venv in $cache/py"
    fi
    if [ -x "$cache/py/bin/pip" ]; then
        timeout 180 "$cache/py/bin/pip" install --quiet --disable-pip-version-check \
            mcp-server-time mcp-server-git \
            && note "PyPI servers in $cache/py" \
            || note "pip could not install mcp-server-time / mcp-server-git (no registry?)"
    fi
else
    note "no $py with venv: the PyPI servers are not installed"
fi

# Node: the packages under one prefix, run with the system's node.
if command -v npm >/dev/null 2>&1 && [ -x /usr/bin/node ]; then
    timeout 180 npm install --silent --no-audit --no-fund --prefix "$cache/npm" \
        @modelcontextprotocol/server-filesystem @modelcontextprotocol/server-everything \
        && note "npm servers in $cache/npm" \
        || note "npm could not install the servers (no registry?)"
else
    note "no npm or /usr/bin/node: the npm servers are not installed"
fi
exit 0
