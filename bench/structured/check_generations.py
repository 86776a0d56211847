"""Validates bench_structured --gen-out documents with the `jsonschema` package (independent of
deepinfer): each text must parse as JSON and validate (with format checking) against its schema.
Usage: python3 check_generations.py GEN.jsonl"""
import json
import sys

import jsonschema


def main():
    ok = bad = 0
    for line in open(sys.argv[1]):
        rec = json.loads(line)
        schema = rec["schema"]
        try:
            value = json.loads(rec["text"])
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)
            ok += 1
        except Exception as e:  # noqa: BLE001 - report every failure kind
            bad += 1
            print("INVALID", rec["file"], repr(rec["text"][:200]), str(e).splitlines()[0][:200])
    print(json.dumps({"valid": ok, "invalid": bad}))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
