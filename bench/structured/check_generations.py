"""Validates bench_structured --gen-out documents with the `jsonschema` package (independent of
deepinfer): each text must parse as JSON and validate (with format checking) against its schema.
Usage: python3 check_generations.py GEN.jsonl

One known gap of the validator is handled explicitly: jsonschema's date-time / time checks reject
every leap second (its own JSON-Schema-Test-Suite run skips those cases: "Leap seconds are
unsupported"), while RFC 3339 and the suite accept second 60 when the time in UTC is 23:59:60.
A document that fails only because of such strings is checked again with each leap second
verified here (UTC 23:59) and replaced by second 59; it counts as valid only if that passes, and
is reported on a "LEAP" line so that it can be inspected."""
import json
import re
import sys

import jsonschema

# hh:mm:60[.frac](Z|±hh:mm) inside a time or date-time string.
LEAP = re.compile(r"(\d{2}):(\d{2}):60(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def leap_is_utc_2359(m):
    hh, mm, off = int(m.group(1)), int(m.group(2)), m.group(4)
    minutes = hh * 60 + mm
    if off not in ("Z", "z"):
        sign = 1 if off[0] == "+" else -1
        minutes -= sign * (int(off[1:3]) * 60 + int(off[4:6]))
    return minutes % 1440 == 23 * 60 + 59


FAIL = object()  # a leap second not at UTC 23:59 (JSON null is None, so not None)


def without_leap_seconds(value, seen):
    """value with every verified leap second's '60' replaced by '59', or FAIL if one is not at UTC
    23:59; seen[0] counts the replacements."""
    if isinstance(value, str):
        out, pos = [], 0
        for m in LEAP.finditer(value):
            if not leap_is_utc_2359(m):
                return FAIL
            out.append(value[pos:m.start()] + f"{m.group(1)}:{m.group(2)}:59{m.group(3) or ''}{m.group(4)}")
            pos = m.end()
            seen[0] += 1
        return "".join(out) + value[pos:]
    if isinstance(value, list):
        items = [without_leap_seconds(v, seen) for v in value]
        return FAIL if any(i is FAIL for i in items) else items
    if isinstance(value, dict):
        d = {k: without_leap_seconds(v, seen) for k, v in value.items()}
        return FAIL if any(v is FAIL for v in d.values()) else d
    return value


def main():
    ok = bad = leap = 0
    for line in open(sys.argv[1]):
        rec = json.loads(line)
        schema = rec["schema"]
        try:
            value = json.loads(rec["text"])
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
            try:
                validator.validate(value)
            except jsonschema.ValidationError:
                seen = [0]
                alt = without_leap_seconds(value, seen)
                if alt is FAIL or seen[0] == 0:
                    raise
                validator.validate(alt)  # the same document with verified leap seconds at :59
                leap += 1
                print("LEAP", rec["file"], repr(rec["text"][:200]))
            ok += 1
        except Exception as e:  # noqa: BLE001 - report every failure kind
            bad += 1
            print("INVALID", rec["file"], repr(rec["text"][:200]), str(e).splitlines()[0][:200])
    print(json.dumps({"valid": ok, "invalid": bad, "valid_with_leap_seconds": leap}))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
