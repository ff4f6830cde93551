#!/usr/bin/env python3
"""Mutation testing of the harness: how many realistic engine bugs does a
fuzz campaign catch?

For every entry of mutants/catalog.toml this script patches the engine in a
scratch copy of the repository, builds it (release), runs one fuzz campaign
and records whether the campaign failed, which invariants it reported and
after how many seeds. The unpatched engine runs first: it must pass, or the
figures would mean nothing.

    python3 mutants/run.py                      # every mutant, 200 seeds, all scenarios
    python3 mutants/run.py --only stage-order --seeds 50
    python3 mutants/run.py --check              # only check that every entry still applies
    python3 mutants/run.py --catalog mutants/held-out.toml   # the held-out set, measured once

Results go to stdout as a table and, with --json FILE, as JSON. The scratch
copy lives in target/mutants/ (its own target dir, so builds are incremental;
only files whose content changed are rewritten there).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "mutants" / "catalog.toml"


def load_catalog(path=CATALOG):
    with open(path, "rb") as f:
        return tomllib.load(f)["mutant"]


def check_applies(root, mutants):
    """Every `find` occurs exactly once in its file. Returns the problems."""
    problems = []
    for m in mutants:
        text = (root / m["file"]).read_text()
        n = text.count(m["find"])
        if n != 1:
            problems.append(f"{m['name']}: `find` occurs {n} times in {m['file']} (must be once)")
    return problems


def sync_scratch(scratch):
    """Brings scratch/tree to the working tree (without target/ and .git/).

    A file whose content differs from the scratch copy is written anew (a new
    modification time); the others are left as they are, so that builds there
    stay incremental. Copying modification times instead would let cargo take
    a file restored to an older time (the working tree's, after a mutant was
    built) for unchanged, and run the last mutant's binary as the baseline."""
    tree = scratch / "tree"
    ignore = {"target", ".git"}
    wanted = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = Path(dirpath).relative_to(ROOT)
        if rel == Path("."):
            dirnames[:] = [d for d in dirnames if d not in ignore]
        for name in filenames:
            src, dst = Path(dirpath) / name, tree / rel / name
            wanted.add(dst)
            data = src.read_bytes()
            if not dst.exists() or dst.read_bytes() != data:
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(data)
                shutil.copymode(src, dst)
    for dirpath, dirnames, filenames in os.walk(tree):
        if Path(dirpath) == tree:
            dirnames[:] = [d for d in dirnames if d not in ignore]
        for name in filenames:
            if Path(dirpath) / name not in wanted:
                (Path(dirpath) / name).unlink()
    return tree


def campaign(tree, target_dir, args):
    env = dict(os.environ)
    env.pop("RUSTFLAGS", None)
    env["CARGO_TARGET_DIR"] = str(target_dir)
    build = subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "leasesim-sim", "--bin", "leasesim"],
        cwd=tree, env=env, capture_output=True, text=True,
    )
    if build.returncode != 0:
        return {"error": "build failed: " + build.stderr.strip().splitlines()[-1] if build.stderr else "build failed"}
    cmd = [str(target_dir / "release" / "leasesim"), "fuzz", "--scenario", args.scenario,
           "--seeds", str(args.seeds), "--jobs", str(args.jobs), "--json"]
    started = time.time()
    run = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if run.returncode not in (0, 1):
        return {"error": f"fuzz exited {run.returncode}: {run.stderr.strip()[-300:]}"}
    summary = json.loads(run.stdout)
    failures = summary["failures"]
    by_invariant = {}
    for f in failures:
        by_invariant.setdefault(f["invariant"], set()).add((f["scenario"], f["seed"]))
    return {
        "runs": summary["seeds"],
        "failing_runs": len(failures),
        "first_seed": min((f["seed"] for f in failures), default=None),
        "invariants": {k: len(v) for k, v in sorted(by_invariant.items())},
        "wall_seconds": round(time.time() - started, 1),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--catalog", default=str(CATALOG),
                   help="the mutants to run (default mutants/catalog.toml; mutants/held-out.toml is the held-out set)")
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--scenario", default="all")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--only", nargs="*", help="mutant names to run (default: all)")
    p.add_argument("--json", help="write the results to this file")
    p.add_argument("--check", action="store_true", help="only check that every entry applies")
    p.add_argument("--skip-baseline", action="store_true", help="do not run the unpatched engine first")
    args = p.parse_args()

    mutants = load_catalog(Path(args.catalog))
    problems = check_applies(ROOT, mutants)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    if args.check:
        print(f"{len(mutants)} mutants, each applies once")
        return 0
    if args.only:
        unknown = set(args.only) - {m["name"] for m in mutants}
        if unknown:
            print(f"unknown mutants: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m["name"] in args.only]

    scratch = ROOT / "target" / "mutants"
    scratch.mkdir(parents=True, exist_ok=True)
    # One run at a time: two runs would patch one scratch tree under each other.
    lock = open(scratch / "lock", "w")
    try:
        import fcntl
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"another mutants/run.py is running (lock {scratch / 'lock'})", file=sys.stderr)
        return 2
    tree = sync_scratch(scratch)
    target_dir = scratch / "target"
    results = []
    if not args.skip_baseline:
        base = campaign(tree, target_dir, args)
        print(f"baseline (no mutant): {json.dumps(base)}", flush=True)
        if base.get("error") or base["failing_runs"]:
            print("the unpatched engine does not pass; mutation figures would mean nothing", file=sys.stderr)
            return 1
    for m in mutants:
        path = tree / m["file"]
        original = path.read_text()
        path.write_text(original.replace(m["find"], m["replace"], 1))
        try:
            r = campaign(tree, target_dir, args)
        finally:
            path.write_text(original)
        r.update(name=m["name"], what=m["what"], **{"class": m["class"]})
        r["caught"] = bool(r.get("failing_runs"))
        results.append(r)
        inv = ", ".join(f"{k} {v}" for k, v in r.get("invariants", {}).items()) or r.get("error", "-")
        print(f"{m['name']:<36} {'CAUGHT' if r['caught'] else 'missed':<7} "
              f"runs {r.get('failing_runs', 0):>4}/{r.get('runs', 0):<4} first seed {r.get('first_seed')}  [{inv}]",
              flush=True)
    caught = sum(r["caught"] for r in results)
    print(f"caught {caught} of {len(results)} ({args.seeds} seeds, scenario {args.scenario})")
    if args.json:
        Path(args.json).write_text(json.dumps({"seeds": args.seeds, "scenario": args.scenario,
                                               "caught": caught, "mutants": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
