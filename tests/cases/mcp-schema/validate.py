#!/usr/bin/env python3
"""Validates requests against MCP's published CreateMessageRequest schema.

Reads JSON lines `[revision, request]` on stdin; writes `1` (valid) or `0`
(invalid) per line. See README.md in this directory.
"""

import json
import pathlib
import sys

import jsonschema

HERE = pathlib.Path(__file__).resolve().parent
VALIDATORS = {}


def validator(revision):
    if revision not in VALIDATORS:
        schema = json.loads((HERE / f"{revision}.json").read_text(encoding="utf-8"))
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        VALIDATORS[revision] = cls(schema)
    return VALIDATORS[revision]


def main():
    out = []
    for line in sys.stdin:
        if not line.strip():
            continue
        revision, request = json.loads(line)
        out.append("1" if validator(revision).is_valid(request) else "0")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
