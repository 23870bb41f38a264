"""``corral image pull`` on a node: the child process the agent starts for one pull
(``corral.agent.pulls``). A registry reference is resolved into the node's cache
(``corral.agent.images``); a SIF is unpacked with Apptainer (``corral.agent.apptainer``),
opened as the asking user."""

from __future__ import annotations

import json

from corral.agent.apptainer import AptError, presif
from corral.agent.images import ImageCache, ImageError


def pull_main(argv: list[str] | None = None) -> int:
    """``corral image pull`` on a node: a child of the agent pulls (or refreshes) one
    reference into the cache, or unpacks a SIF (opened as ``uid``/``gid``) with
    Apptainer. argv[0]: JSON {cache_dir, max_mb, insecure, skopeo, pull_timeout_s, ref,
    apptainer, uid, gid, refresh, progress}: ``refresh`` false (an early pull, for a
    pending job) leaves a cached reference as it is; ``progress`` prints each progress
    note as a ``P <note>`` line (``corral.agent.pulls`` reads them). Exit 0 (the digest
    printed) when the image is in the cache."""
    import sys

    from corral.containers.spec import ContainerError, parse_image

    args = json.loads((argv if argv is not None else sys.argv[1:])[0])
    try:
        ref = parse_image(str(args["ref"]))
        cache = ImageCache(str(args["cache_dir"]), int(args.get("max_mb", 20480)),
                           insecure=tuple(args.get("insecure") or ()),
                           skopeo=str(args.get("skopeo") or "skopeo"),
                           pull_timeout_s=float(args.get("pull_timeout_s", 900.0)))
        if ref.kind == "sif":
            try:
                digest = presif(cache, ref.canonical, str(args.get("apptainer") or ""),
                                args.get("uid"), args.get("gid"))
            except AptError as exc:
                raise ImageError(str(exc)) from None
            print(digest)
            return 0
        def note(text: str) -> None:
            print(f"P {text}", flush=True)

        image = cache.resolve(ref, refresh=bool(args.get("refresh", True)),
                              progress=note if args.get("progress") else None)
    except (ContainerError, ImageError, OSError) as exc:
        print(f"corral image pull: {exc}", file=sys.stderr)
        return 1
    print(image.digest)
    return 0
