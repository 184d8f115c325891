"""Builds and walks dicts and lists, as a program's data handling does: a
record (a dict) per item with a string key, an index of them by name, the
records grouped into lists, tags counted, a third of the index deleted and
everything looked up, the records sorted and a report text joined.

Run by bench/realprog.c (its python mode), which computes every line this
prints again from n alone and compares: the output depends on integer
arithmetic and sorted orders only, never on hash or dict order, so it is the
same under every allocator and every Python 3.  Keep the two in step.

    python3 dicts.py N
"""

import sys

MASK = (1 << 64) - 1


def spread(i):
    """The item's pseudo-random 32-bit number (a multiplicative hash: a
    different one for each i below 2^32)."""
    return (i * 2654435761) & 0xFFFFFFFF


def main():
    n = int(sys.argv[1])
    m = n // 16 + 1

    people = []
    for i in range(n):
        x = spread(i)
        people.append({"id": i, "name": "user%08x" % x, "group": x % m,
                       "score": x % 1000, "tags": ["t%d" % (x % 7)] * (x % 4)})

    by_name = {p["name"]: p for p in people}

    groups = {}
    for p in people:
        groups.setdefault(p["group"], []).append(p)
    acc = 0
    for g in sorted(groups):
        members = groups[g]
        s = sum(p["score"] for p in members)
        acc = (acc * 1000003 + g * 7 + len(members) * 31 + s) & MASK

    counts = {}
    for p in people:
        for t in p["tags"]:
            counts[t] = counts.get(t, 0) + 1

    for i in range(0, n, 3):
        del by_name["user%08x" % spread(i)]
    found = sum(1 for p in people if p["name"] in by_name)

    order = sorted(people, key=lambda p: (p["score"], -p["id"]))
    oacc = 0
    for pos, p in enumerate(order):
        oacc = (oacc * 31 + (pos + 1) * p["id"]) & MASK

    text = "\n".join(",".join((p["name"], str(p["score"]))) for p in order)

    print("records", n, "groups", len(groups))
    print("groups", acc)
    print("tags", " ".join("%s=%d" % kv for kv in sorted(counts.items())))
    print("found", found)
    print("order", oacc)
    print("text", len(text))


main()
