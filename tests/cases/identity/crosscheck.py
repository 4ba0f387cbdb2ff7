#!/usr/bin/env python3
"""Independent request identity: the seed's Python sketch with NFC applied.

Usage: crosscheck.py vectors.json

For each vector whose params are integer-only (within +-2^53) and whose keys
all lie in the Basic Multilingual Plane -- where RFC 8785 and
`json.dumps(sort_keys=True)` agree -- prints one JSON line
{"index": i, "name": ..., "identity": ...}. The Rust test
`python_sketch_agrees` compares these with the frozen identities.
"""

import hashlib
import json
import sys
import unicodedata

LIMIT = 2**53


def nfc(value):
    """NFC-normalise every string in value, keys included."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, list):
        return [nfc(item) for item in value]
    if isinstance(value, dict):
        return {unicodedata.normalize("NFC", k): nfc(v) for k, v in value.items()}
    return value


def eligible(value):
    """Integer-only, within +-2^53, BMP keys: the inputs where the sketch is JCS."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return -LIMIT <= value <= LIMIT
    if isinstance(value, float):
        return False
    if isinstance(value, list):
        return all(eligible(item) for item in value)
    if isinstance(value, dict):
        return all(max(map(ord, k), default=0) <= 0xFFFF and eligible(v) for k, v in value.items())
    return False


def request_identity(server_id, params, fields):
    # The seed's sketch, with NFC applied to every string and key.
    payload = nfc({k: params.get(k) for k in fields})
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return f"{server_id}:{digest[:32]}"


def main(path):
    with open(path, encoding="utf-8") as fh:
        vectors = json.load(fh)["vectors"]
    for index, vector in enumerate(vectors):
        params, fields = vector["params"], vector["fields"]
        if not eligible({k: params.get(k) for k in fields}):
            continue
        ident = request_identity(vector["server"], params, fields)
        print(json.dumps({"index": index, "name": vector["name"], "identity": ident}))


if __name__ == "__main__":
    main(sys.argv[1])
