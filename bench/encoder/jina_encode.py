"""Side (c) of bench/encoder/run.sh: the seed's main.py with Jina. Starts a
Deployment of MyGPUExec (jina_executor.py) on 127.0.0.1, posts N copies of the
tutorial sentence with request_size 32, checks every doc got a 384-d
embedding, and prints a line in encode_10k's format:
  docs_per_s=<v> n=<N> seconds=<post time> startup_seconds=<v> ...

  python jina_encode.py --model-path DIR [--docs N] [--device cpu] [--dtype float32|bfloat16]
                        [--replicas R] [--no-progress]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SENTENCE = 'Using a GPU allows you to significantly speed up encoding.'


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('--model-path', required=True)
    parser.add_argument('--docs', type=int, default=10000)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--dtype', default='float32', choices=['float32', 'bfloat16'])
    parser.add_argument('--replicas', type=int, default=1)
    parser.add_argument('--no-progress', action='store_true')
    args = parser.parse_args()

    from docarray import DocList
    from docarray.documents import TextDoc
    from jina import Deployment
    import numpy as np
    from jina_executor import MyGPUExec

    start = time.perf_counter()
    dep = Deployment(uses=MyGPUExec,
                     uses_with={'device': args.device, 'model_path': args.model_path,
                                'dtype': args.dtype},
                     replicas=args.replicas, host='127.0.0.1')
    with dep:
        startup = time.perf_counter() - start
        docs = DocList[TextDoc]([TextDoc(text=SENTENCE) for _ in range(args.docs)])
        post_start = time.perf_counter()
        out = dep.post(on='/encode', inputs=docs, request_size=32,
                       show_progress=not args.no_progress, return_type=DocList[TextDoc])
        seconds = time.perf_counter() - post_start
    if len(out) != args.docs:
        print(f'jina_encode: posted {args.docs} docs, got {len(out)} back', file=sys.stderr)
        return 1
    bad = sum(1 for d in out if d.embedding is None or np.asarray(d.embedding).shape != (384,))
    if bad:
        print(f'jina_encode: {bad} docs without a 384-d embedding', file=sys.stderr)
        return 1
    print(f'encoded {len(out)} documents in {seconds:.2f} s: {len(out) / seconds:.1f} docs/s '
          f'(startup {startup:.2f} s)')
    print(f'docs_per_s={len(out) / seconds:.1f} n={len(out)} seconds={seconds:.3f} '
          f'startup_seconds={startup:.3f} replicas={args.replicas} request_size=32 device={args.device} '
          f'dtype={args.dtype}')
    return 0


if __name__ == '__main__':
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The Deployment is closed by now, but the interpreter's exit hangs on
    # something Jina leaves behind (seen with jina 3.34.0); run.sh kills the
    # process group after every run anyway.
    os._exit(rc)
