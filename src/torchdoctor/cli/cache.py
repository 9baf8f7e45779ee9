"""``torchdoctor cache``: build, describe and verify the offline cache (docs/remedies.md)."""

from __future__ import annotations

import argparse
import sys

from .._errors import EXIT_USAGE, TorchdoctorError
from ..options import non_negative_int, positive_int


def add_cache(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cache",
        help="preprocess a dataset once into a fast memory-mapped cache (build, info, verify)",
        description=(
            "Decode, resize and colour-convert a dataset once and store it as uint8/int arrays "
            "that CachedDataset maps into memory. SOURCE and DEST may be local paths or fsspec "
            "URLs (s3://...; s3fs reads AWS_ENDPOINT_URL and the usual AWS credentials)."
        ),
    )
    actions = p.add_subparsers(title="actions", metavar="ACTION")
    build = actions.add_parser(
        "build",
        help="build a cache from an image folder or a module:callable dataset",
        description=(
            "SOURCE is a folder laid out as class_name/*.jpg|png, or module:callable returning a "
            "map-style Dataset. An interrupted build resumes when run again with the same "
            "arguments."
        ),
    )
    build.add_argument("source", metavar="SOURCE", help="image folder or module:callable")
    build.add_argument("dest", metavar="DEST", help="cache directory (path or URL)")
    build.add_argument("--size", type=positive_int, help="resize images to SIZE pixels")
    build.add_argument(
        "--resize",
        choices=("crop", "squash", "shorter"),
        default="crop",
        help="crop: shorter side to SIZE then a centred square (default); squash: SIZE x SIZE; "
        "shorter: shorter side to SIZE, aspect kept",
    )
    build.add_argument("--mode", choices=("RGB", "L"), default="RGB", help="colour mode (RGB)")
    build.add_argument(
        "--encoded",
        action="store_true",
        help="keep the image files' bytes (smaller; decoded on every read) instead of pixels",
    )
    build.add_argument(
        "--workers",
        type=non_negative_int,
        help="build processes (default: one per CPU from 2000 samples on, else none)",
    )
    build.add_argument(
        "--shard-mb", type=positive_int, default=128, help="megabytes per shard file (128)"
    )
    build.add_argument(
        "--overwrite", action="store_true", help="replace a different cache found at DEST"
    )
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.set_defaults(handler=_cmd_cache_build)
    info = actions.add_parser("info", help="describe a cache: samples, fields, source")
    info.add_argument("dest", metavar="DEST")
    info.add_argument("--json", action="store_true", help="print the whole manifest as JSON")
    info.set_defaults(handler=_cmd_cache_info)
    verify = actions.add_parser("verify", help="check every file of a cache against its checksums")
    verify.add_argument("dest", metavar="DEST")
    verify.set_defaults(handler=_cmd_cache_verify)
    p.set_defaults(handler=lambda args: _print_help(p))


def _cmd_cache_build(args: argparse.Namespace) -> int:
    from ..remedies import build_cache

    build_cache(
        args.source,
        args.dest,
        size=args.size,
        resize=args.resize,
        mode=args.mode,
        encoded=args.encoded,
        workers=args.workers,
        shard_mb=args.shard_mb,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    return 0


def _cmd_cache_info(args: argparse.Namespace) -> int:
    import json

    from ..remedies import open_manifest

    manifest = open_manifest(args.dest)
    if args.json:
        print(json.dumps(manifest, indent=1))
        return 0
    source = manifest["source"]
    print(f"cache      {args.dest}")
    print(f"samples    {manifest['count']} in {len(manifest['shards'])} shards")
    print(f"source     {source.get('url') or source.get('callable')} ({source['kind']})")
    if source.get("classes"):
        print(f"classes    {len(source['classes'])}: {', '.join(source['classes'][:8])}")
    print(f"options    {manifest['options']}")
    for spec in manifest["fields"]:
        shape = spec["shape"] if spec["shape"] is not None else f"variable, {spec['ndim']}-d"
        print(
            f"field      {spec['name']}: {spec['dtype']} {shape}, {spec['bytes'] / 2**20:.1f} MiB"
        )
    if manifest.get("image_layout"):
        print(f"images     uint8 {manifest['image_layout']}")
    print(f"built      {manifest['created_at']} by {manifest['created_by']}")
    return 0


def _cmd_cache_verify(args: argparse.Namespace) -> int:
    from ..remedies import CachedDataset

    dataset = CachedDataset(args.dest)
    problems = dataset.verify()
    if problems:
        for problem in problems:
            print(f"damaged    {problem}", file=sys.stderr)
        raise TorchdoctorError(
            f"cache at {args.dest} is damaged ({len(problems)} file(s))",
            "rebuild it with `torchdoctor cache build SOURCE DEST --overwrite`",
        )
    print(f"ok         {args.dest}: {len(dataset)} samples, every checksum matches")
    return 0


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_USAGE
