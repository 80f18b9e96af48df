"""``themisto publish``: upload a complete build to the Hugging Face Hub in one commit.

    themisto publish my-org/themisto --dry-run
    HF_TOKEN=hf_... themisto publish my-org/themisto

Then ``datasets.load_dataset("my-org/themisto", "output_prediction_runtime")`` works anywhere.
"""

from __future__ import annotations

import argparse
import sys

from themisto.cli.options import add_data_argument


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``publish`` subcommand."""
    parser = subparsers.add_parser(
        "publish",
        help="upload a complete build to the Hugging Face Hub as a dataset repository, in one commit",
        description=(
            "Check that the build is complete (every config and split the card names exists inside the build"
            " folder and reads as Parquet with the rows the card states), then create the dataset repository"
            " REPO_ID if needed and upload the card and those files in one commit. The token is read from the"
            " HF_TOKEN environment variable only, and never printed."
        ),
    )
    parser.add_argument("repo_id", metavar="REPO_ID", help="the Hub dataset id, OWNER/NAME, e.g. my-org/themisto")
    add_data_argument(parser, "the build folder to upload")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", metavar="BRANCH", help="commit to this branch (created if needed; default main)")
    parser.add_argument(
        "--dry-run", action="store_true", help="check the build and list what would be uploaded; no network call"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check, then list (``--dry-run``) or upload the build."""
    from themisto.building.publish import build_files, check_repo_id, commit_operations, upload
    from themisto.cli.options import describe_data
    from themisto.evaluation.data import find_data

    check_repo_id(args.repo_id)
    data = find_data(args.data, local=True)
    files = build_files(data.location)
    print(f"themisto publish: {describe_data(data)}", file=sys.stderr)
    if args.dry_run:
        operations = commit_operations(files, args.repo_id)  # what the commit would hold, made offline
        visibility = "private" if args.private else "public"
        branch = args.revision or "main"
        print(f"would create or reuse the {visibility} dataset {args.repo_id} and commit to {branch}:")
        for operation, file in zip(operations, files):
            rows = "" if file.rows is None else f", {file.rows} rows"
            print(f"  {operation.path_in_repo}  ({operation.upload_info.size} bytes{rows})")
        print(f"{len(operations)} files, {sum(op.upload_info.size for op in operations)} bytes in one commit")
        return 0
    url = upload(files, args.repo_id, private=args.private, revision=args.revision)
    print(f"published {len(files)} files to {url}")
    print(f'load it with datasets.load_dataset("{args.repo_id}", "output_prediction_runtime", split="test")')
    return 0
