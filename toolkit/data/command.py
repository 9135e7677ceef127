"""The data command line: list | fetch NAME... | path NAME | verify [NAME...].

It lists and fetches whatever is registered in the catalogue, so it runs where the domains'
catalogues are imported: ``ctk data ...`` (cli.py). ``fetch`` accepts ``default`` (what the
default recipes and tests need) and ``all``. Progress goes to stderr; ``path`` prints only the
folder on stdout, so ``$(ctk data path austen)`` works in scripts. Exit status 1 with a
one-paragraph message on any failure.
"""

from __future__ import annotations

import argparse
import sys
import time

from .catalog import default_names
from .fetchers import DataError, log
from .folder import catalog, data_root, expand_names, fetch, is_installed, locate, verify


def _list(root: str | None) -> None:
    base = data_root(root)
    print(f"data root: {base}   (* = in 'default')")
    print(f"{'name':<18} {'state':<9} {'download':>9} {'installed':>10}  source / licence")
    for name, entry in catalog().items():
        star = "*" if name in default_names() else " "
        state = "installed" if is_installed(name, base) else "-"
        print(
            f"{name:<17}{star} {state:<9} {entry.download_bytes / 1e6:>7.1f}MB "
            f"{entry.installed_bytes / 1e6:>8.1f}MB  {entry.source}"
        )
        print(f"{'':<41}  {entry.licence}\n{'':<41}  {entry.description}")


def main(argv: list[str] | None = None, prog: str = "ctk data") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--root", help="data root (default: $CTK_DATA, else ./data)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="every dataset, its source, licence, size and state")
    fetch_cmd = commands.add_parser("fetch", help="install datasets ('default', 'all' or names)")
    fetch_cmd.add_argument("names", nargs="+")
    fetch_cmd.add_argument("--force", action="store_true", help="fetch again even if installed")
    path_cmd = commands.add_parser("path", help="print the folder of an installed dataset")
    path_cmd.add_argument("name")
    verify_cmd = commands.add_parser("verify", help="re-hash installed datasets (default: all installed)")
    verify_cmd.add_argument("names", nargs="*")
    # --root is accepted before or after the sub-command.
    for sub in (fetch_cmd, path_cmd, verify_cmd):
        sub.add_argument("--root", dest="sub_root", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = getattr(args, "sub_root", None) or args.root
    try:
        if args.command == "list":
            _list(root)
        elif args.command == "fetch":
            start = time.perf_counter()
            names = expand_names(args.names)
            for name in names:
                fetch(name, root, force=args.force)
            log(f"{len(names)} dataset(s) ready in {data_root(root)} ({time.perf_counter() - start:.1f} s)")
        elif args.command == "path":
            print(locate(args.name, root, fetch=False))
        else:
            names = expand_names(args.names) if args.names else [n for n in catalog() if is_installed(n, root)]
            for name in names:
                log(f"{name}: verified {verify(name, root)}")
    except (DataError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0
