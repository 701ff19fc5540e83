"""Serves NoOpExec with Jina on 127.0.0.1:PORT, as a Deployment (gateway + one
worker process) or, with --no-gateway, as the bare worker. Blocks until SIGTERM.

    python jina_serve.py --port 12345 [--no-gateway]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from jina import Deployment  # noqa: E402

from noop_exec import NoOpExec  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--no-gateway', action='store_true')
    args = parser.parse_args()
    dep = Deployment(
        uses=NoOpExec,
        port=args.port,
        host='127.0.0.1',
        protocol='grpc',
        replicas=1,
        include_gateway=not args.no_gateway,
        quiet=True,
    )
    with dep:
        dep.block()


if __name__ == '__main__':
    main()
