"""Three banks' own files, for docs/own-data.md: accounts and transfers, made up here.

Each bank gets ``OUT/<bank>/accounts.csv`` (``account`` id such as ``NB-4411-0192``, eight
numeric features, ``is_fraud`` 0/1 and ``split`` train/val/test) and ``OUT/<bank>/transfers.csv``
(``from_account``, ``to_account``): transfers within the bank and to other banks' accounts. A
transfer between two banks is in both banks' books, as in real ledgers. Fraudulent accounts send
more to each other (the graph carries signal) and their features drift a little.

    python examples/own_data_banks.py --out banks --accounts 2000

Nothing here is real data, and none of it is committed: run the script to make it. ``main()``
(what tests/test_examples.py runs) goes the whole way in a temporary folder: files, secret,
each bank's ``fedgl ingest``, ``fedgl.run_shards`` (which writes the model), then
``fedgl predict``: each bank's scores file, a row per own account (docs/using-the-model.md).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

BANKS = {"northbank": "NB", "southbank": "SB", "eastbank": "EB"}
FEATURES = ("balance_log", "account_age_years", "tx_per_month", "avg_amount_log",
            "night_share", "foreign_share", "distinct_payees", "chargebacks")


def make(out: Path, accounts: int, seed: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    ids, bank, fraud = [], [], []
    for b, prefix in enumerate(BANKS.values()):
        n = accounts + int(rng.integers(-accounts // 10, accounts // 10 + 1))
        for _ in range(n):
            ids.append(f"{prefix}-{rng.integers(1000, 9999)}-{rng.integers(0, 10**4):04d}"
                       f"{rng.integers(0, 10**4):04d}")
            bank.append(b)
            fraud.append(bool(rng.random() < 0.15))
    ids = [f"{s}{i}" for i, s in enumerate(ids)]   # unique
    n = len(ids)
    fraud_a = np.array(fraud)
    bank_a = np.array(bank)
    base = rng.normal(size=(n, len(FEATURES)))
    x = base + 0.6 * fraud_a[:, None] * np.array([-0.5, -1.0, 1.0, 0.8, 1.2, 1.0, 0.7, 1.5])
    x[:, 1] = np.abs(x[:, 1]) * 3          # years
    x[:, 4:6] = 1 / (1 + np.exp(-x[:, 4:6]))  # shares in (0, 1)
    x[:, 7] = np.maximum(0, np.round(x[:, 7]))
    split = np.array(["train", "train", "train", "val", "test"])[rng.integers(0, 5, size=n)]
    edges = set()
    frauds = np.flatnonzero(fraud_a)
    while len(edges) < 4 * n:
        a = int(rng.integers(n))
        if fraud_a[a] and rng.random() < 0.5:
            c = int(rng.choice(frauds))
        elif rng.random() < 0.8:
            same = np.flatnonzero(bank_a == bank_a[a])
            c = int(rng.choice(same))
        else:
            c = int(rng.integers(n))
        if a != c:
            edges.add((a, c))
    counts = {}
    for b, name in enumerate(BANKS):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        mine = np.flatnonzero(bank_a == b)
        with open(folder / "accounts.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["account", *FEATURES, "is_fraud", "split"])
            for i in mine:
                w.writerow([ids[i], *(f"{v:.4f}" for v in x[i]), int(fraud_a[i]), split[i]])
        with open(folder / "transfers.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["from_account", "to_account"])
            for a, c in sorted(edges):
                if bank_a[a] == b or bank_a[c] == b:
                    w.writerow([ids[a], ids[c]])
        counts[name] = int(len(mine))
    return counts


def run_banks(root: Path, accounts: int = 300, seed: int = 0, **overrides: object) -> object:
    """The whole of docs/own-data.md in one process: make the banks' files under ``root``, the
    secret, each bank's ingest, then ``fedgl.run_shards`` (FedGCN 2-hop unless overridden)."""
    import fedgl
    from fedgl.cli import main as fedgl_cli

    make(root / "banks", accounts, seed)
    if fedgl_cli(["secret", "--out", str(root / "federation.secret")]) != 0:
        raise SystemExit(2)
    folders = []
    for k, bank in enumerate(BANKS):
        out = root / f"{bank}-ingest"
        code = fedgl_cli(["ingest", "--nodes", str(root / "banks" / bank / "accounts.csv"),
                          "--edges", str(root / "banks" / bank / "transfers.csv"),
                          "--client-id", str(k), "--id-column", "account",
                          "--label-column", "is_fraud", "--split-column", "split",
                          "--source-column", "from_account", "--target-column", "to_account",
                          "--classes", "0", "1", "--name", "banks",
                          "--secret", str(root / "federation.secret"), "--out", str(out)])
        if code != 0:
            raise SystemExit(code)
        folders.append(out)
    # the shards decide the data set, the clients, the normalisation and the partition: a run
    # that sets them is refused, so the overrides (tests/test_examples.py's small SBM settings)
    # keep the rest
    shards_decide = {"dataset", "clients", "normalize_features", "partition", "beta",
                     "mcmahan_p", "metis_max_degree", "min_client_size"}
    keys = {"algorithm": "fedgcn", "hops": 2, "rounds": 20, "progress": False,
            **{k: v for k, v in overrides.items() if k not in shards_decide}}
    result = fedgl.run_shards(folders, **keys, out=str(root / "run"))
    # each bank's scores: a CSV per bank (named after its ingest folder), keyed by its own ids
    code = fedgl_cli(["predict", "--model", str(root / "run" / "model"), "--shards",
                      *map(str, folders), "--out", str(root / "scores")])
    if code != 0:
        raise SystemExit(code)
    return result


def main(**overrides: object) -> object:
    """Three small banks end to end (a temporary folder); prints and returns the result."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result = run_banks(Path(tmp), **overrides)
        first = sorted((Path(tmp) / "scores").glob("*.csv"))[0]
        rows = first.read_text().splitlines()
        print(f"{first.name}: {len(rows) - 1} accounts scored, e.g. {rows[1]}")
    print(f"own:banks, 3 banks: test acc {result.mean('test_acc'):.3f}")
    return result


def cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="banks", type=Path)
    ap.add_argument("--accounts", type=int, default=2000, help="accounts per bank (about)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    counts = make(args.out, args.accounts, args.seed)
    print(f"wrote {', '.join(f'{b}: {n} accounts' for b, n in counts.items())} under {args.out}")


if __name__ == "__main__":
    cli()
