#!/usr/bin/env python3
"""The crate's public API, as one line per item, from rustdoc's JSON output.

Usage: public_api.py JSON [--counts]

Walks the public module tree from the crate root, following public re-exports, and
lists each item once, at the shortest path it is reachable by (ties: outside the prelude, then the
first in alphabetical order): modules, types (structs, enums, unions, traits, type aliases),
functions, methods of inherent impls, constants and statics, and exported macros.
Trait methods, fields and variants are part of their type's line, not counted apart.

With --counts, prints a table of counts per top-level module instead.
"""
import heapq
import json
import sys
from collections import defaultdict

KINDS = {
    "module": "mod",
    "struct": "struct",
    "enum": "enum",
    "union": "union",
    "trait": "trait",
    "type_alias": "type",
    "function": "fn",
    "constant": "const",
    "static": "static",
    "macro": "macro",
}
TYPE_KINDS = {"struct", "enum", "union", "trait", "type"}


def kind_of(item):
    (kind,) = item["inner"].keys()
    return kind


def main():
    path = sys.argv[1]
    counts = "--counts" in sys.argv[2:]
    with open(path) as f:
        doc = json.load(f)
    index = doc["index"]
    root = str(doc["root"])
    crate = index[root]["name"]

    best = {}  # id -> (path tuple, kind)
    # Shortest paths first, so the first path an item is reached by is its own; the
    # prelude's re-exports last, as it only repeats names found elsewhere.
    queue = [(1, False, (crate,), root)]

    def push(item_id, item_path):
        heapq.heappush(queue, (len(item_path), "prelude" in item_path, item_path, str(item_id)))

    while queue:
        _, _, item_path, item_id = heapq.heappop(queue)
        item = index.get(str(item_id))
        if item is None:
            continue
        kind = kind_of(item)
        if kind == "use":
            use = item["inner"]["use"]
            target = use.get("id")
            if target is None:
                continue
            target_item = index.get(str(target))
            if target_item is None:
                continue
            if use["is_glob"]:
                if kind_of(target_item) == "module":
                    for child in target_item["inner"]["module"]["items"]:
                        push(child, item_path[:-1])
                # A glob of an enum's variants names nothing new.
                continue
            push(target, item_path[:-1] + (use["name"],))
            continue
        if kind not in KINDS:
            continue
        if item_id in best:
            continue
        best[item_id] = (item_path, KINDS[kind])
        if kind == "module":
            for child in item["inner"]["module"]["items"]:
                child_item = index.get(str(child))
                if child_item is None:
                    continue
                if child_item.get("visibility") != "public":
                    continue
                if kind_of(child_item) == "use":
                    push(child, item_path + ("_",))
                else:
                    push(child, item_path + (child_item["name"],))
        elif kind in ("struct", "enum", "union"):
            impls = item["inner"][kind]["impls"]
            for impl_id in impls:
                impl = index.get(str(impl_id))
                if impl is None:
                    continue
                inner = impl["inner"]["impl"]
                if inner["trait"] is not None or inner.get("is_synthetic") or inner.get("blanket_impl"):
                    continue
                for method_id in inner["items"]:
                    method = index.get(str(method_id))
                    if method is None or method.get("visibility") != "public":
                        continue
                    member = {"function": "method", "assoc_const": "const"}.get(kind_of(method))
                    if member and str(method_id) not in best:
                        best[str(method_id)] = (item_path + (method["name"],), member)

    lines = sorted(("::".join(p), k) for p, k in best.values() if p != (crate,))
    if not counts:
        for path, kind in lines:
            print(f"{kind} {path}")
        return
    # The table docs/architecture.md shows (a test checks the two agree): per public
    # module of the root, its items and the methods of its types; everything reached
    # from the root itself (its re-exports, the root module's own items) as "(root)".
    modules = {path.split("::")[1] for path, kind in lines if kind == "mod" and path.count("::") == 1}
    table = defaultdict(lambda: defaultdict(int))
    for path, kind in lines:
        parts = path.split("::")
        module = parts[1] if len(parts) > 2 and parts[1] in modules else "(root)"
        column = {
            "mod": "modules",
            "fn": "functions",
            "method": "methods",
            "const": "constants",
            "static": "constants",
            "macro": "macros",
        }.get(kind, "types")
        table[module][column] += 1
    columns = ["modules", "types", "functions", "methods", "constants", "macros"]
    print("| module | " + " | ".join(columns) + " | total |")
    print("| --- | " + " | ".join("---" for _ in columns) + " | --- |")
    totals = defaultdict(int)
    for module in sorted(table, key=lambda m: (m != "(root)", m)):
        row = table[module]
        for c in columns:
            totals[c] += row[c]
        print(f"| `{module}` | " + " | ".join(str(row[c]) for c in columns) + f" | {sum(row.values())} |")
    print("| **all** | " + " | ".join(str(totals[c]) for c in columns) + f" | **{sum(totals.values())}** |")


if __name__ == "__main__":
    main()
