"""latchclaw's prelude for code_run: `import latchclaw`.

Talks to latchclaw over two inherited pipes, never the network. A secret
is only ever a placeholder here; latchclaw puts its value into a request
to a host the secret is bound to, and nowhere else.
"""

import json as _json
import os as _os

__all__ = ["secret", "secrets", "http", "tool", "output", "sleep", "Denied", "Failed"]

_fds = _os.environ.get("LATCHCLAW_CODE_FDS", "")


class Denied(Exception):
    """The gate or the operator refused what was asked."""


class Failed(Exception):
    """What was asked ran and failed, or could not be asked."""


try:
    _w, _r = (int(x) for x in _fds.split(","))
    _out = _os.fdopen(_w, "wb", buffering=0)
    _in = _os.fdopen(_r, "rb")
except (ValueError, OSError):
    _out = _in = None


def _call(op, **fields):
    if _out is None:
        raise Failed("no channel to latchclaw (run this through code_run)")
    fields["op"] = op
    _out.write((_json.dumps(fields) + "\n").encode())
    line = _in.readline()
    if not line:
        raise Failed("latchclaw closed the channel")
    answer = _json.loads(line)
    if "error" in answer:
        kind = Denied if answer.get("kind") == "denied" else Failed
        raise kind(answer["error"])
    return answer.get("ok")


def secret(name):
    """A placeholder for the secret NAME (never its value)."""
    return _call("secret", name=str(name))


def secrets():
    """The names of the secrets the config lets code use."""
    return _call("secrets")


class Response(dict):
    @property
    def status(self):
        return self["status"]

    @property
    def body(self):
        return self["body"]

    @property
    def headers(self):
        return self["headers"]

    def json(self):
        return _json.loads(self["body"])


def http(method, url, headers=None, body=None):
    """One request, sent by latchclaw under the http tool's network policy.
    Placeholders in headers and body become the secret's value only for a
    host the secret is bound to. Returns status, headers and body (text)."""
    if body is not None and not isinstance(body, str):
        # Placeholders stay as they are (not \u escapes), to be found.
        body = _json.dumps(body, ensure_ascii=False)
    return Response(
        _call(
            "http",
            method=str(method),
            url=str(url),
            headers={str(k): str(v) for k, v in (headers or {}).items()},
            body=body or "",
        )
    )


def tool(name, args=None):
    """Calls a latchclaw tool through the gate, as the model would; its
    output. Raises Denied when refused, Failed when it failed."""
    return _call("tool", name=str(name), args=args or {})


def output(value):
    """The run's structured result (JSON); the last one given is kept."""
    _call("output", value=value)


def sleep(secs):
    """Sleeps, at most until the run's deadline."""
    _call("sleep", secs=float(secs))
