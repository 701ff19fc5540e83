"""Side (e) of bench/encoder/run.sh: the model alone in its reference
implementation, sentence-transformers' encode() in one process (no server),
N copies of the tutorial sentence in batches of 32. Prints a line in
encode_10k's format:
  docs_per_s=<v> n=<N> seconds=<encode time> startup_seconds=<v> ...

  python st_bare.py --model-path DIR [--docs N] [--device cpu|cuda|cuda:N]
                    [--dtype float32|bfloat16|float16]
"""
import argparse
import time

SENTENCE = 'Using a GPU allows you to significantly speed up encoding.'


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('--model-path', required=True)
    parser.add_argument('--docs', type=int, default=10000)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--dtype', default='float32', choices=['float32', 'bfloat16', 'float16'])
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    start = time.perf_counter()
    model = SentenceTransformer(args.model_path, device=args.device)
    model.to(getattr(torch, args.dtype))
    # A warm process, as a server's would be: kernels chosen, buffers made.
    model.encode([SENTENCE] * 32, batch_size=32)
    startup = time.perf_counter() - start

    texts = [SENTENCE] * args.docs
    start = time.perf_counter()
    embeddings = model.encode(texts, batch_size=32, convert_to_numpy=True)
    seconds = time.perf_counter() - start
    if embeddings.shape != (args.docs, 384):
        print(f'st_bare: got embeddings of shape {embeddings.shape}, expected ({args.docs}, 384)')
        return 1
    print(f'docs_per_s={args.docs / seconds:.1f} n={args.docs} seconds={seconds:.3f} '
          f'startup_seconds={startup:.3f} device={args.device} dtype={args.dtype}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
