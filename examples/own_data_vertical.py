"""Three organisations with different columns about overlapping customers, for the vertical part
of docs/own-data.md: a bank, a telecom and an insurer, made up here.

Each party gets its own node table and edge table, keyed by the same ``customer`` id
(``C-...``), each holding customers the others do not have:

- ``OUT/bank/customers.csv`` (``customer``, six account features, ``default`` 0/1, ``split``
  train/val/test) and ``OUT/bank/links.csv`` (``source``, ``target``: shared guarantors);
- ``OUT/telco/subscribers.csv`` (``customer``, five usage features) and ``OUT/telco/calls.csv``;
- ``OUT/insurer/policyholders.csv`` (``customer``, four policy features) and
  ``OUT/insurer/households.csv``.

Defaulters differ a little in every party's columns and are linked to each other more often,
so each party's columns and edges carry part of the signal (what GLASU's vertical split needs).

    python examples/own_data_vertical.py --out orgs --customers 2000

Nothing here is real data, and none of it is committed: run the script to make it. ``main()``
(what tests/test_examples.py runs) goes the whole way in a temporary folder: files, secret,
each party's ``fedgl ingest --vertical`` (labels at the bank only), then ``fedgl.run_shards``
(the private set intersection and GLASU, in one process).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

#: party -> (node table, edge table, feature columns, share of all customers it holds)
PARTIES = {
    "bank": ("customers.csv", "links.csv",
             ("balance_log", "income_log", "debt_ratio", "late_payments", "card_count",
              "tenure_years"), 0.85),
    "telco": ("subscribers.csv", "calls.csv",
              ("monthly_bill", "data_gb", "night_calls", "roaming_share", "contract_years"),
              0.75),
    "insurer": ("policyholders.csv", "households.csv",
                ("premium_log", "claims", "vehicle_age", "policy_years"), 0.7),
}


def make(out: Path, customers: int, seed: int) -> dict[str, int]:
    """Write every party's two tables under ``out``; the customers each party holds."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"C-{i:06d}-{rng.integers(100, 999)}" for i in range(customers)])
    default = rng.random(customers) < 0.2
    counts = {}
    for name, (nodes, edges, features, share) in PARTIES.items():
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        held = np.flatnonzero(rng.random(customers) < share)
        shift = rng.normal(size=len(features))
        x = rng.normal(size=(len(held), len(features))) + 1.0 * default[held, None] * shift
        with open(folder / nodes, "w", newline="") as f:
            w = csv.writer(f)
            labels = ["default", "split"] if name == "bank" else []
            w.writerow(["customer", *features, *labels])
            splits = np.array(["train", "train", "train", "val", "test"])
            for row, i in enumerate(held):
                extra = [int(default[i]), splits[rng.integers(0, 5)]] if labels else []
                w.writerow([ids[i], *(f"{v:.4f}" for v in x[row]), *extra])
        links: set[tuple[int, int]] = set()
        bad = held[default[held]]
        while len(links) < 3 * len(held):
            a = int(rng.choice(held))
            b = int(rng.choice(bad if default[a] and rng.random() < 0.5 and len(bad) else held))
            if a != b:
                links.add((min(a, b), max(a, b)))
        with open(folder / edges, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["source", "target"])
            for a, b in sorted(links):
                w.writerow([ids[a], ids[b]])
        counts[name] = int(len(held))
    return counts


def run_parties(root: Path, customers: int = 300, seed: int = 0, rounds: int = 20,
                **overrides: object) -> object:
    """The vertical part of docs/own-data.md in one process: the parties' files under ``root``,
    the secret, each party's vertical ingest (labels at the bank), then ``fedgl.run_shards``."""
    import fedgl
    from fedgl.cli import main as fedgl_cli

    make(root / "orgs", customers, seed)
    if fedgl_cli(["secret", "--out", str(root / "federation.secret")]) != 0:
        raise SystemExit(2)
    folders = []
    for k, (name, (nodes, edges, _, _)) in enumerate(PARTIES.items()):
        labels = ["--label-column", "default", "--split-column", "split"] if k == 0 else []
        out = root / f"{name}-vertical"
        code = fedgl_cli(["ingest", "--vertical", "--nodes", str(root / "orgs" / name / nodes),
                          "--edges", str(root / "orgs" / name / edges), "--client-id", str(k),
                          "--id-column", "customer", *labels, "--name", "credit",
                          "--secret", str(root / "federation.secret"), "--out", str(out)])
        if code != 0:
            raise SystemExit(code)
        folders.append(out)
    keys = {"algorithm": "glasu", "rounds": rounds, "progress": False, **overrides}
    result = fedgl.run_shards(folders, **keys, out=str(root / "run"))
    # the label holder's scores for the common customers, keyed by its own customer ids
    code = fedgl_cli(["predict", "--model", str(root / "run" / "model"), "--shards",
                      *map(str, folders), "--out", str(root / "scores")])
    if code != 0:
        raise SystemExit(code)
    return result


def main(**overrides: object) -> object:
    """Three small parties end to end (a temporary folder); prints and returns the result.
    Of tests/test_examples.py's overrides only ``rounds`` applies: the data, the clients and
    their split come from the parties' own files."""
    import tempfile

    rounds = int(overrides.get("rounds", 20))   # type: ignore[call-overload]
    with tempfile.TemporaryDirectory() as tmp:
        result = run_parties(Path(tmp), rounds=rounds)
        for scores in sorted((Path(tmp) / "scores").glob("*.csv")):
            rows = scores.read_text().splitlines()
            print(f"{scores.name}: {len(rows) - 1} customers scored, e.g. {rows[1]}")
    print(f"own:credit, 3 parties (vertical): test acc {result.mean('test_acc'):.3f}")
    return result


def cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="orgs", type=Path)
    ap.add_argument("--customers", type=int, default=2000, help="customers in all (about)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    counts = make(args.out, args.customers, args.seed)
    print(f"wrote {', '.join(f'{p}: {n} customers' for p, n in counts.items())} under "
          f"{args.out}")


if __name__ == "__main__":
    cli()
