"""Standalone kubesim: `python -m tests.kubesim --listen 127.0.0.1:0 --kubeconfig-out PATH`.

Prints the URL once listening, writes the kubeconfig, runs until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

import trio

from tests.kubesim.images import FileImages, build_default_images
from tests.kubesim.server import open_kubesim


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.kubesim", description=__doc__)
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any)")
    parser.add_argument("--kubeconfig-out", type=Path, help="write a kubeconfig here")
    parser.add_argument("--namespace", default="runnerd")
    parser.add_argument("--client-cert", action="store_true", help="kubeconfig uses a client cert")
    parser.add_argument(
        "--images-file",
        type=Path,
        help='JSON {"image": [entrypoint argv]}: extra images, read at each pull',
    )
    parser.add_argument("--no-kubelet", action="store_true", help="pods are never scheduled")
    parser.add_argument(
        "--compaction-interval",
        type=float,
        default=300.0,
        help="seconds between history compactions (kube-apiserver: 300; 0: never)",
    )
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if host != "127.0.0.1" or not port.isdigit():
        parser.error(f"--listen must be 127.0.0.1:PORT (loopback only), not {args.listen!r}")
    args.port = int(port)
    return args


async def run_standalone(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="kubesim-") as tmp:
        async with open_kubesim(
            Path(tmp),
            namespace=args.namespace,
            port=args.port,
            images=FileImages(args.images_file, build_default_images())
            if args.images_file
            else None,
            kubelet=not args.no_kubelet,
            compaction_interval_s=args.compaction_interval or None,
        ) as sim:
            if args.kubeconfig_out:
                sim.write_kubeconfig(args.kubeconfig_out, client_cert=args.client_cert)
            print(sim.url, flush=True)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break


def main(argv: list[str] | None = None) -> None:
    trio.run(run_standalone, parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
