"""Texts of varied lengths in requests of varied sizes: what an embedding
server meets in production, unlike the seed job's one sentence repeated.
Gantry (SentenceEncoder behind `gantry deployment`) against Infinity
(PyPI infinity-emb 0.0.78, torch engine) on the same model folder, and
optionally against a second Gantry build (--before-build-dir: an A/B of a
change) and against the same build with other pass widths (--batch-sizes:
extra sides `gantry-bN`, SentenceEncoder's `batch_size: N`) or with requests
merged (--merged-batch-sizes: sides `gantry-mN`, `batch_size: N` and the
requests queued while a call runs merged into the next, up to N texts).

Each of --clients client threads keeps one request in flight to the
OpenAI-style route (Gantry's POST /v1/embeddings, Infinity's POST
/embeddings): 1, 1, 2, 4, 8, 16, 32 or 64 texts, each 3 to 60 words drawn
from a fixed vocabulary, from a random generator seeded per thread
(--seed), so every side gets the same requests in the same order. After
--warmup-seconds, the requests answered in --seconds are counted. Every
reply must be a 200 with one 384-float embedding per text.

For each side in turn (the order rotated every round) the server is
started on 127.0.0.1, loaded, measured and stopped. Prints per side the
medians over the rounds of texts/s and request latency p50/p99, and the
ratios. --out FILE.tsv writes one row per side and round.

  python3 bench/encoder/varied_load.py [--build-dir DIR] [--before-build-dir DIR]
      [--batch-sizes N,N...] [--merged-batch-sizes N,N...]
      [--dtype float32|bfloat16|int8] [--threads T] [--clients C] [--seconds S]
      [--warmup-seconds S] [--rounds R] [--seed N] [--no-infinity] [--out FILE.tsv]
"""
import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from embedding_servers import (MODEL_NAME, ROOT, Server, free_port, gantry_side, infinity_side,
                               parse_checked, server_env, write_tsv)

WORDS = ('the of and to in is was for on that with as by at from it an be are this which or '
         'model server request batch token text query passage search vector embedding index '
         'river mountain city history music science garden kitchen winter summer morning '
         'engine network memory cluster latency throughput machine learning language small '
         'large quick brown fox jumps over lazy dog while reading writing running building '
         'encoding sentences transformer served cores virtual cloud price market report '
         'government school children family doctor patient hospital energy water climate '
         'football player season team match goal coach league final record').split()
SIZES = (1, 1, 2, 4, 8, 16, 32, 64)
DIMENSION = 384


def make_request(rnd: random.Random) -> list:
    return [' '.join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 60)))
            for _ in range(rnd.choice(SIZES))]


def client(port, path, seed, stop, measuring, results, errors):
    rnd = random.Random(seed)
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=120)
    latencies, texts = [], 0
    try:
        while not stop.is_set():
            inputs = make_request(rnd)
            body = json.dumps({'model': MODEL_NAME, 'input': inputs})
            start = time.monotonic()
            conn.request('POST', path, body, {'Content-Type': 'application/json'})
            reply = conn.getresponse()
            data = reply.read()
            elapsed = time.monotonic() - start
            if reply.status != 200:
                raise RuntimeError(f'POST {path}: HTTP {reply.status}: {data[:300]!r}')
            got = json.loads(data)['data']
            if len(got) != len(inputs) or any(len(d['embedding']) != DIMENSION for d in got):
                raise RuntimeError(f'POST {path}: asked for {len(inputs)} embeddings of '
                                   f'{DIMENSION}, got {len(got)}')
            if measuring.is_set() and not stop.is_set():
                latencies.append(elapsed)
                texts += len(inputs)
    except Exception as e:  # a client's failure fails the run, named
        errors.append(f'client {seed}: {e}')
        stop.set()
    finally:
        conn.close()
    results.append((latencies, texts))


def measure(side, args, tmp):
    port = free_port()
    log_path = os.path.join(tmp, f'{side["label"]}.log')
    probe = json.dumps({'model': MODEL_NAME, 'input': ['warm-up']}).encode()
    with Server(side['label'], side['cmd'](port), side['env'], port, side['path'],
                log_path) as server:
        server.wait_ready(probe)
        stop, measuring = threading.Event(), threading.Event()
        results, errors = [], []
        threads = [threading.Thread(target=client,
                                    args=(port, side['path'], args.seed * 1000 + i, stop,
                                          measuring, results, errors))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        try:
            stop.wait(args.warmup_seconds)
            measuring.set()
            start = time.monotonic()
            stop.wait(args.seconds)
            seconds = time.monotonic() - start
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=180)
        if errors:
            raise RuntimeError(f'{side["label"]}: {errors[0]} (server log: {log_path})')
        if any(t.is_alive() for t in threads):
            raise RuntimeError(f'{side["label"]}: a client did not finish within 180 s')
    latencies = sorted(x for lat, _ in results for x in lat)
    texts = sum(n for _, n in results)
    if not latencies:
        raise RuntimeError(f'{side["label"]}: no request was answered in {seconds:.1f} s')

    def quantile(q):
        return latencies[min(len(latencies) - 1, round(q * (len(latencies) - 1)))] * 1000

    return {'side': side['label'], 'texts_per_s': texts / seconds,
            'requests': len(latencies), 'p50_ms': quantile(0.5), 'p99_ms': quantile(0.99)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--build-dir', default=os.environ.get('GANTRY_BUILD_DIR',
                                                              os.path.join(ROOT, 'build')))
    parser.add_argument('--before-build-dir', default='')
    parser.add_argument('--batch-sizes', default='',
                        help='comma-separated pass widths, each an extra side of --build-dir')
    parser.add_argument('--merged-batch-sizes', default='',
                        help='the same, each side with its requests merged up to the width')
    parser.add_argument('--dtype', default='bfloat16', choices=['float32', 'bfloat16', 'int8'])
    parser.add_argument('--threads', type=int, default=os.cpu_count())
    parser.add_argument('--clients', type=int, default=8)
    parser.add_argument('--seconds', type=float, default=20.0)
    parser.add_argument('--warmup-seconds', type=float, default=5.0)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--no-infinity', action='store_true')
    parser.add_argument('--out', default='')
    args = parse_checked(parser, [('--threads', 1, 256), ('--clients', 1, 256),
                                  ('--rounds', 1, 100), ('--seconds', 1, 3600),
                                  ('--warmup-seconds', 0, 600)])
    def widths(flag, text):
        try:
            values = [int(b) for b in text.split(',') if b.strip()]
        except ValueError:
            parser.error(f'{flag}: {text!r} is not a list of integers')
        if any(not 1 <= b <= 4096 for b in values) or len(set(values)) != len(values):
            parser.error(f'{flag}: {text!r}: each in 1..4096, none twice')
        return values

    batch_sizes = widths('--batch-sizes', args.batch_sizes)
    merged_sizes = widths('--merged-batch-sizes', args.merged_batch_sizes)
    if args.dtype == 'int8' and not args.no_infinity:
        parser.error('--dtype int8 is for Gantry sides only (Infinity runs float32 or '
                     'bfloat16 here): add --no-infinity')
    builds = [('gantry', args.build_dir)]
    if args.before_build_dir:
        builds.append(('gantry-before', args.before_build_dir))
    env = server_env('varied_load', [os.path.join(b, 'bin', 'gantry') for _, b in builds],
                     args.threads)
    if env is None:
        return 2
    model = env['GANTRY_MODEL_PATH']

    with tempfile.TemporaryDirectory(prefix='varied-load-') as tmp:
        sides = [gantry_side(args, os.path.join(build, 'bin', 'gantry'), model, env, tmp,
                             label=label) for label, build in builds]
        sides += [gantry_side(args, os.path.join(args.build_dir, 'bin', 'gantry'), model, env,
                              tmp, batch_size=b) for b in batch_sizes]
        sides += [gantry_side(args, os.path.join(args.build_dir, 'bin', 'gantry'), model, env,
                              tmp, batch_size=b, merged=True) for b in merged_sizes]
        if not args.no_infinity:
            sides.append(infinity_side(args, model, env))
        rows = []
        try:
            for r in range(args.rounds):
                for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                    row = measure(side, args, tmp)
                    row['round'] = r + 1
                    rows.append(row)
                    print(f'round {r + 1} {row["side"]}: {row["texts_per_s"]:.1f} texts/s, '
                          f'{row["requests"]} requests, p50 {row["p50_ms"]:.1f} ms, '
                          f'p99 {row["p99_ms"]:.1f} ms', flush=True)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f'varied_load: {e}', file=sys.stderr)
            return 1

    keys = ['texts_per_s', 'p50_ms', 'p99_ms']
    medians = {s['label']: {k: statistics.median(row[k] for row in rows
                                                 if row['side'] == s['label']) for k in keys}
               for s in sides}
    print(f'\n{args.dtype}, {args.threads} threads, {args.clients} clients, '
          f'{args.rounds} rounds of {args.seconds:g} s after {args.warmup_seconds:g} s '
          '(medians)')
    print(f'{"side":<15}{"texts/s":>10}{"p50 ms":>10}{"p99 ms":>10}')
    for label, m in medians.items():
        print(f'{label:<15}{m["texts_per_s"]:>10.1f}{m["p50_ms"]:>10.1f}{m["p99_ms"]:>10.1f}')
    g = medians['gantry']
    for other in (['gantry-before', 'infinity'] + [f'gantry-b{b}' for b in batch_sizes] +
                  [f'gantry-m{b}' for b in merged_sizes]):
        if other in medians:
            o = medians[other]
            print(f'gantry / {other}: texts/s {g["texts_per_s"] / o["texts_per_s"]:.2f}, '
                  f'p50 {o["p50_ms"] / g["p50_ms"]:.2f}x lower, '
                  f'p99 {o["p99_ms"] / g["p99_ms"]:.2f}x lower')
    if args.out:
        write_tsv(args.out, ['round', 'side'] + keys + ['requests'], rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
