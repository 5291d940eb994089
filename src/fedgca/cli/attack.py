"""CLI: ``fedgca attack --run DIR [--victim I]`` (SPEC §6)."""
from __future__ import annotations

import json


def register(sub) -> None:
    from fedgca import devices, methods

    white_box = [m for m in methods.names(attack=True) if methods.get(m).attack == "white-box"]
    latent = [m for m in methods.names(attack=True) if methods.get(m).attack == "latent"]
    p = sub.add_parser("attack", help="server-side extraction attack on one victim client of a finished run",
                       description=f"White-box inversion ({', '.join(white_box)}) or latent-only "
                                   f"flipping ({', '.join(latent)}) against one client; writes attack.json, "
                                   "attack_outputs.npz and, for images, attack_grid.png into the run directory.")
    p.add_argument("--run", required=True, help="a finished run directory")
    p.add_argument("--victim", type=int, default=0, help="victim client (default 0)")
    p.add_argument("--data-dir", help="dataset directory (default: $FEDGCA_DATA_DIR, else the user cache)")
    p.add_argument("--data", metavar="PATH", help="own data: the file or per-site directory the run was made with "
                   "(its content digest is checked against the run's)")
    p.add_argument("--schema", metavar="S.json", help="own data's schema, as given to the run")
    p.add_argument("--test-file", metavar="FILE", help="own data's test file, as given to the run")
    p.add_argument("--test-split", choices=("balanced", "balanced-tail", "per-site"),
                   help="own data's test split, as given to the run")
    p.add_argument("--device", help=f"where the attack computes: {devices.CHOICES} (default: the run's --device)")
    p.set_defaults(func=cmd_attack)


def cmd_attack(args) -> int:
    from fedgca.attacks.run import attack_run

    source = None
    if args.data:  # own data: the run's own name, so that the source is the run's dataset
        from pathlib import Path

        from fedgca import rundir
        from fedgca.data.source import open_source

        name = rundir.load_json(rundir.verify(Path(args.run), rundir.CONFIG))["dataset"]
        source = open_source(args.data, args.schema, test_file=args.test_file, test_split=args.test_split, name=name)
    rec = attack_run(args.run, victim=args.victim, source=source, data_dir=args.data_dir, device=args.device)
    shown = {k: rec[k] for k in ("method", "dataset", "seed", "victim", "ntmse", "delta_cos", "attack_seconds")}
    if "direct_decodes" in rec:
        shown["direct_decodes"] = {k: rec["direct_decodes"][k] for k in ("ntmse", "delta_cos")}
    print(json.dumps(shown, indent=1))
    return 0
