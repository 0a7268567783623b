"""The commands by which organisations bring their own data and keys (docs/own-data.md):

- ``fedgl secret --out FILE``: the federation secret (the organisations share it among
  themselves, never with the server);
- ``fedgl ingest``: one organisation's tables to its ingest folder and the pseudonyms-only
  request it hands to set-up;
- ``fedgl index REQUEST ... --out DIR``: set-up's positions (whoever runs set-up; pseudonyms
  only);
- ``fedgl place --ingest DIR --positions FILE --out DIR``: the organisation's own shard;
- ``fedgl key --client-id K --out DIR``: the organisation's own identity key, made where it
  lives (``client-K.key``, private, and ``client-K.pub.json``, the public half to hand over);
- ``fedgl roster PUB ... --out FILE`` and ``fedgl roster --check FILE PUB ...``: the organisations
  assemble the roster from the public halves and each checks it holds its own key;
- ``fedgl psi start|blind|intersect|place``: vertical alignment by PSI, one command per step,
  its messages files an untrusted relay passes around (:mod:`fedgl.privacy.psi_files`); each
  party ends with its own GLASU vertical shard over the intersection.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedgl.errors import ConfigError, DataError

COMMANDS = ("secret", "ingest", "index", "place", "key", "roster", "psi")


def add_parsers(sub: Any) -> None:
    """The sub-commands above (cli.py calls this)."""
    sec = sub.add_parser("secret", help="make the federation secret the organisations share "
                         "(never the server)", description="Write 32 random bytes (hex) to "
                         "FILE, mode 0600; share it among the organisations only.")
    sec.add_argument("--out", required=True, metavar="FILE")

    ing = sub.add_parser("ingest", help="one organisation's own tables (CSV, Parquet) to its "
                         "ingest folder", description="Check and pseudonymise the nodes and "
                         "edges tables (docs/own-data.md); writes ingest.json/.npz (private) and "
                         "request-<k>.json/.npz (pseudonyms only, for set-up).")
    ing.add_argument("mapping", nargs="?", metavar="MAPPING.yaml",
                     help="YAML file of these settings (flags override it)")
    ing.add_argument("--nodes", metavar="FILE", help="nodes table (.csv, .tsv or .parquet)")
    ing.add_argument("--edges", metavar="FILE", help="edges table")
    ing.add_argument("--client-id", type=int, metavar="K",
                     help="this organisation's client id in the federation (0..K-1)")
    ing.add_argument("--id-column", metavar="NAME", help="the nodes' id column (default: id)")
    ing.add_argument("--label-column", metavar="NAME")
    ing.add_argument("--feature-columns", nargs="+", metavar="NAME",
                     help="default: every column but the id, label and split columns")
    ing.add_argument("--split-column", metavar="NAME",
                     help="values train, val, test or empty (default: drawn from the pseudonym, "
                          "60/20/20)")
    ing.add_argument("--source-column", metavar="NAME", help="edges' source id (default: source)")
    ing.add_argument("--target-column", metavar="NAME", help="edges' target id (default: target)")
    ing.add_argument("--classes", nargs="+", metavar="C",
                     help="the federation's class list (default: the labels present)")
    ing.add_argument("--name", metavar="NAME", help="the data set's name (runs name it own:NAME; "
                     "default: own)")
    ing.add_argument("--normalize-features", action="store_true", default=None,
                     help="row-normalise the features (non-negative ones)")
    ing.add_argument("--vertical", action="store_true", default=None,
                     help="a vertical party's tables (GLASU: own columns about entities other "
                          "parties also hold); writes vertical.json/.npz for alignment by PSI")
    ing.add_argument("--secret", metavar="FILE", help="the federation secret (fedgl secret)")
    ing.add_argument("--out", metavar="DIR")

    idx = sub.add_parser("index", help="set-up: integer positions from the organisations' "
                         "pseudonyms", description="Check the organisations' requests agree "
                         "(secret, feature width, classes, settings) and number their nodes; "
                         "writes positions-<k>.json/.npz per organisation and federation.json.")
    idx.add_argument("requests", nargs="+", metavar="REQUEST",
                     help="request-<k>.json files (or folders holding one)")
    idx.add_argument("--out", required=True, metavar="DIR")

    pl = sub.add_parser("place", help="an organisation's shard from its ingest and its positions",
                        description="Write client-<k>.json/.npz (fedgl-shard/1) for fedgl client.")
    pl.add_argument("--ingest", required=True, metavar="DIR")
    pl.add_argument("--positions", required=True, metavar="FILE")
    pl.add_argument("--out", required=True, metavar="DIR")

    key = sub.add_parser("key", help="make this organisation's own identity key where it lives",
                         description="Write client-K.key (private: it never leaves this "
                                     "organisation) and client-K.pub.json (the public half to "
                                     "hand to the other organisations).")
    key.add_argument("--client-id", type=int, required=True, metavar="K")
    key.add_argument("--out", required=True, metavar="DIR")

    ros = sub.add_parser("roster", help="assemble the roster from the public halves, or check it",
                         description="With --out: write roster.json from every organisation's "
                                     "client-K.pub.json. With --check ROSTER: check that ROSTER "
                                     "holds exactly these public keys (each organisation checks "
                                     "its own).")
    ros.add_argument("public", nargs="+", metavar="PUB", help="client-K.pub.json files")
    ros.add_argument("--out", metavar="FILE")
    ros.add_argument("--check", metavar="ROSTER")

    psi = sub.add_parser("psi", help="vertical alignment by PSI through a relay, one command per "
                         "step (docs/own-data.md)", description="Each party: start, then blind "
                         "the sets the relay hands it (K-1 of them), then place its GLASU shard "
                         "from its result; the relay: intersect the fully blinded sets.")
    steps = psi.add_subparsers(dest="psi_step", metavar="STEP", required=True)
    st = steps.add_parser("start", help="party: blind its own ids once (a fresh key)")
    st.add_argument("--ingest", required=True, metavar="DIR",
                    help="the party's `fedgl ingest --vertical` folder")
    st.add_argument("--parties", required=True, type=int, metavar="K")
    st.add_argument("--out", required=True, metavar="FILE")
    st.add_argument("--threads", type=int, default=1, metavar="N",
                    help="threads that blind (default 1; the values are the same for any N)")
    bl = steps.add_parser("blind", help="party: blind another party's set once more")
    bl.add_argument("--ingest", required=True, metavar="DIR")
    bl.add_argument("--set", required=True, metavar="FILE", dest="set_file")
    bl.add_argument("--out", required=True, metavar="FILE")
    bl.add_argument("--threads", type=int, default=1, metavar="N",
                    help="threads that blind (default 1; the values are the same for any N)")
    it = steps.add_parser("intersect", help="relay: the results from the fully blinded sets")
    it.add_argument("sets", nargs="+", metavar="SET")
    it.add_argument("--out", required=True, metavar="DIR")
    pp = steps.add_parser("place", help="party: its GLASU vertical shard from its result")
    pp.add_argument("--ingest", required=True, metavar="DIR")
    pp.add_argument("--result", required=True, metavar="FILE")
    pp.add_argument("--out", required=True, metavar="DIR")


def main(args: argparse.Namespace) -> int:
    return {"secret": _secret, "ingest": _ingest, "index": _index, "place": _place,
            "key": _key, "roster": _roster, "psi": _psi}[args.command](args)


def _secret(args: argparse.Namespace) -> int:
    from fedgl.data.own.secret import make_secret

    print(f"secret written to {make_secret(args.out)}; share it with the other organisations "
          "only, never with the server")
    return 0


def _ingest(args: argparse.Namespace) -> int:
    from fedgl.data.own.ingest import IngestSpec, ingest, ingest_vertical, load_mapping

    settings = load_mapping(args.mapping) if args.mapping else {}
    for name in ("nodes", "edges", "client_id", "id_column", "label_column", "feature_columns",
                 "split_column", "source_column", "target_column", "classes", "name",
                 "normalize_features", "vertical", "secret", "out"):
        value = getattr(args, name)
        if value is not None:
            settings[name] = value
    missing = [f"--{k.replace('_', '-')}" for k in ("nodes", "edges", "client_id", "secret",
                                                    "out") if settings.get(k) is None]
    if missing:
        raise ConfigError(f"fedgl ingest needs {', '.join(missing)} (flags or the mapping file)")
    secret, out = settings.pop("secret"), settings.pop("out")
    for k in ("classes", "feature_columns"):
        if k in settings and not (isinstance(settings[k], list)
                                  and all(isinstance(c, str | int) for c in settings[k])):
            raise DataError(f"'{k}' must be a list of names")
        if k in settings:
            settings[k] = [str(c) for c in settings[k]]
    out_path = Path(out)
    if out_path.exists() and not out_path.is_dir():
        raise ConfigError(f"--out '{out}' exists and is not a folder")
    if settings.pop("vertical", False):
        path = ingest_vertical(IngestSpec(**settings), secret, out_path)
        print(f"vertical ingest written to {path}: it holds this party's features and labels "
              "(ids as keyed pseudonyms), so keep it here; try the parties with `fedgl run "
              "--shards DIR... --algorithm glasu`, deploy with `fedgl psi start` "
              "(docs/own-data.md)")
        return 0
    request = ingest(IngestSpec(**settings), secret, out_path)
    print(f"ingest written to {out_path}; hand {request.name} and {request.with_suffix('.npz').name}"
          " (pseudonyms only) to set-up, keep ingest.json/.npz here")
    return 0


def _index(args: argparse.Namespace) -> int:
    from fedgl.data.own.placement import assign_positions, read_request, write_positions

    out = Path(args.out)
    if out.exists() and any(out.glob("positions-*.json")):
        raise ConfigError(f"'{out}' already holds positions; choose an empty --out folder")
    positions, facts = assign_positions([read_request(p) for p in args.requests])
    paths = write_positions(out, positions, facts)
    print(f"{len(paths)} organisations, {facts['num_nodes']} nodes: positions written to {out}; "
          "give positions-<k>.json/.npz to organisation k")
    return 0


def _place(args: argparse.Namespace) -> int:
    from fedgl.data.own.placement import place, read_ingest, read_positions
    from fedgl.data.shard_format import write_shard

    out = Path(args.out)
    ingested, positions = read_ingest(args.ingest), read_positions(args.positions)
    data, source = place(ingested, positions)
    if out.exists() and (out / f"client-{data.client_id}.json").exists():
        raise ConfigError(f"'{out}' already holds client {data.client_id}'s shard; choose an "
                          "empty --out folder")
    path = write_shard(data, out, source)
    _place_ids(Path(args.ingest), ingested[1]["own"], positions[1]["own"], path,
               data.client_id)
    print(f"shard written to {path} ({data.num_nodes} nodes, {data.edge_index.size(1)} edge "
          f"ends; {source['dropped_edges']} edges to unknown ids dropped); run it with "
          f"`fedgl client --data {path}` and a config with dataset {source['dataset']}")
    return 0


def _place_ids(ingest: Path, own: Any, pos: Any, manifest: Path, client_id: int) -> None:
    """Beside the shard, the organisation's private map from its shard's node numbers (``pos``,
    the positions of its pseudonyms ``own``) to its own raw ids (from the ingest's ``ids.csv``),
    so that the scores its client writes name them."""
    from fedgl.data.own.ingest import OWN_IDS, read_own_ids
    from fedgl.data.shard_format import ids_path, write_ids

    if not (ingest / OWN_IDS).is_file():
        return
    ids = read_own_ids(ingest, own)
    order = sorted(range(len(ids)), key=lambda i: int(pos[i]))
    write_ids(ids_path(manifest, client_id), [int(pos[i]) for i in order],
              [ids[i] for i in order])


def _key(args: argparse.Namespace) -> int:
    from fedgl.privacy.own_keys import write_own_key

    private, public = write_own_key(Path(args.out), args.client_id)
    print(f"private key written to {private} (keep it here); hand {public} to the other "
          "organisations")
    return 0


def _roster(args: argparse.Namespace) -> int:
    from fedgl.privacy.own_keys import assemble_roster, check_roster

    if bool(args.out) == bool(args.check):
        raise ConfigError("give --out ROSTER (assemble) or --check ROSTER (check), one of them")
    if args.out:
        path = assemble_roster([Path(p) for p in args.public], Path(args.out))
        print(f"roster written to {path}; every organisation checks it with `fedgl roster "
              "--check` before using it")
        return 0
    digest = check_roster(Path(args.check), [Path(p) for p in args.public])
    print(f"roster {args.check} holds exactly these {len(args.public)} public keys (digest "
          f"{digest[:16]})")
    return 0


def _psi(args: argparse.Namespace) -> int:
    from fedgl.privacy import psi_files

    step = args.psi_step
    if step == "start":
        path = psi_files.start(args.ingest, args.parties, args.out, args.threads)
        print(f"blinded set written to {path}; hand it to the relay (the key stays in "
              f"{args.ingest})")
    elif step == "blind":
        path = psi_files.blind(args.ingest, args.set_file, args.out, args.threads)
        print(f"set blinded once more: {path}; hand it back to the relay")
    elif step == "intersect":
        figures = psi_files.intersect(args.sets, args.out)
        print(f"{figures['common']} common entities of sets {figures['sizes']}: results written "
              f"to {args.out}; give result-<k>.psi to party k")
    else:
        path = psi_files.place(args.ingest, args.result, args.out)
        print(f"vertical shard written to {path}; run it with `fedgl client --data {path}` "
              "and a GLASU config naming the shard's dataset and clients")
    return 0
