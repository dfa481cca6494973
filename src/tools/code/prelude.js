// latchclaw's prelude for code_run: `const latchclaw = require("latchclaw")`.
//
// Talks to latchclaw over two inherited pipes, never the network. A secret
// is only ever a placeholder here; latchclaw puts its value into a request
// to a host the secret is bound to, and nowhere else.
"use strict";
const fs = require("fs");

class Denied extends Error {}
class Failed extends Error {}

const fds = (process.env.LATCHCLAW_CODE_FDS || "").split(",").map(Number);
const W = fds.length === 2 && fds.every(Number.isInteger) ? fds[0] : null;
const R = W === null ? null : fds[1];
let pending = Buffer.alloc(0);

function readLine() {
  const chunk = Buffer.alloc(65536);
  for (;;) {
    const nl = pending.indexOf(10);
    if (nl >= 0) {
      const line = pending.subarray(0, nl).toString("utf8");
      pending = pending.subarray(nl + 1);
      return line;
    }
    let n;
    try {
      n = fs.readSync(R, chunk, 0, chunk.length, null);
    } catch (e) {
      if (e.code === "EAGAIN") continue;
      throw e;
    }
    if (n === 0) return null;
    pending = Buffer.concat([pending, chunk.subarray(0, n)]);
  }
}

function call(op, fields) {
  if (W === null) throw new Failed("no channel to latchclaw (run this through code_run)");
  fs.writeSync(W, JSON.stringify(Object.assign({ op }, fields || {})) + "\n");
  const line = readLine();
  if (line === null) throw new Failed("latchclaw closed the channel");
  const answer = JSON.parse(line);
  if ("error" in answer) {
    throw answer.kind === "denied" ? new Denied(answer.error) : new Failed(answer.error);
  }
  return answer.ok;
}

module.exports = {
  Denied,
  Failed,
  // A placeholder for the secret NAME (never its value).
  secret: (name) => call("secret", { name: String(name) }),
  // The names of the secrets the config lets code use.
  secrets: () => call("secrets"),
  // One request, sent by latchclaw under the http tool's network policy.
  http: (method, url, headers, body) => {
    if (body !== undefined && body !== null && typeof body !== "string") body = JSON.stringify(body);
    const h = {};
    for (const [k, v] of Object.entries(headers || {})) h[String(k)] = String(v);
    const r = call("http", { method: String(method), url: String(url), headers: h, body: body || "" });
    r.json = () => JSON.parse(r.body);
    return r;
  },
  // Calls a latchclaw tool through the gate, as the model would; its output.
  tool: (name, args) => call("tool", { name: String(name), args: args || {} }),
  // The run's structured result (JSON); the last one given is kept.
  output: (value) => { call("output", { value: value === undefined ? null : value }); },
  // Sleeps, at most until the run's deadline.
  sleep: (secs) => { call("sleep", { secs: Number(secs) }); },
};
