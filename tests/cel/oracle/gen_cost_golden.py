"""Regenerate tests/cel/cost_golden.jsonl: the API server's worst-case cost (CompilationResult.MaxCost in the
NewExpressions environment, what validation compares with 1,000,000) of every expression of celgo_golden.jsonl
and of cost_extra.txt, from the real k8s.io/dynamic-resource-allocation v0.37.2 (cel-go v0.29.2).

Build the oracle as gen_golden.py says, with hack/k8s/v1.37/go.mod and go.sum instead of v1.36's, then:
    PYTHONPATH=src python tests/cel/oracle/gen_cost_golden.py /tmp/celoracle/celoracle
Only expressions that compile upstream are kept; each line:
{"e": expression, "c": consumable capacity gate, "l": list-type attributes gate, "cost": MaxCost}.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CEL = os.path.dirname(HERE)


def main(oracle: str) -> None:
    seen: set[tuple[str, bool, bool]] = set()
    cases: list[tuple[str, bool, bool]] = []
    with open(os.path.join(CEL, "celgo_golden.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "e" in r and (r["e"], r["c"], r["l"]) not in seen:
                seen.add((r["e"], r["c"], r["l"]))
                cases.append((r["e"], r["c"], r["l"]))
    with open(os.path.join(CEL, "cost_extra.txt")) as f:
        for line in f:
            e = line.rstrip("\n")
            if e and not e.startswith("#"):
                for lists in (False, True):
                    if (e, True, lists) not in seen:
                        seen.add((e, True, lists))
                        cases.append((e, True, lists))
    device = {"driver": "x", "attributes": {}, "capacity": {}, "multi": False}
    reqs = [{"expr": e, "consumable": c, "lists": lt, **device, "new": True} for e, c, lt in cases]
    text = "\n".join(json.dumps(r) for r in reqs)
    out = subprocess.run([oracle], input=text, capture_output=True, text=True, check=True)
    with open(os.path.join(CEL, "cost_golden.jsonl"), "w") as f:
        for (e, c, lt), line in zip(cases, out.stdout.splitlines(), strict=True):
            got = json.loads(line)
            if not got.get("compile"):
                f.write(json.dumps({"e": e, "c": c, "l": lt, "cost": got["cost"]}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
