#!/usr/bin/env python3
"""Parses Prometheus text (stdin) with the reference client's parser and
prints one JSON object: {family: {"type": ..., "samples": [[name, labels, value], ...]}}.
Exit 1 with the parser's error when the text does not parse."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

text = sys.stdin.read()
out = {}
try:
    for fam in text_string_to_metric_families(text):
        out[fam.name] = {
            "type": fam.type,
            "samples": [[s.name, s.labels, s.value] for s in fam.samples],
        }
except Exception as e:  # the parser raises ValueError and others
    print(f"unparsable: {e}", file=sys.stderr)
    sys.exit(1)
print(json.dumps(out))
