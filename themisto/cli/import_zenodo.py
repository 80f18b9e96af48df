"""``themisto import-zenodo``: the published Themisto record -> trajectory JSONL files."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "import-zenodo",
        help="convert the published Themisto record (Zenodo 14861889) to trajectory JSONL",
        description="Convert the Themisto Zenodo record (a local file, folder or zip, a record URL, "
        "zenodo:ID, or a file URL) into one trajectory JSONL file per notebook.",
    )
    parser.add_argument(
        "source",
        metavar="PATH_OR_URL",
        help="local file/folder/zip, https://zenodo.org/records/14861889, zenodo:14861889, or a file URL",
    )
    parser.add_argument(
        "-o", "--output", default="data/trajectories", help="folder for the JSONL files (default: %(default)s)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace trajectory files of the same names (default: refuse)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from themisto.recording.zenodo import import_zenodo

    written = import_zenodo(
        args.source, args.output, notice=lambda line: print(line, file=sys.stderr), overwrite=args.overwrite
    )
    print(f"wrote {len(written)} trajectories to {args.output}")
    for path in written:
        print(f"  {path}")
    return 0
