"""How long a one-text request waits while a bulk client keeps an embedding
server busy: Gantry (SentenceEncoder behind `gantry deployment`) against
Infinity (PyPI infinity-emb 0.0.78, torch engine) serving the same model
folder on the same CPU, over the same HTTP route and the same client.

For each side, in turn (the order rotated every round):
  1. start the server on 127.0.0.1 and post until it answers;
  2. idle: one client posts one text at a time for --idle-seconds
     (gantry_loadgen --mode http --concurrency 1);
  3. under load: --bulk-concurrency clients each keep one request of
     --bulk-request-size texts in flight (the queue a bulk indexer makes),
     and beside them the same one-text client runs for --seconds, inside the
     bulk clients' window;
  4. stop the server.
Both sides get the OpenAI-style body {"model": ..., "input": [...]}:
Gantry's POST /v1/embeddings, Infinity's POST /embeddings. Any answer but a
200 carrying an embedding fails the run (gantry_loadgen's http mode).

Prints, per side, the medians over the rounds of the one-text request's p50
and p99 (idle and under load) and the bulk clients' docs/s, then Infinity's
figure over Gantry's for each. --gantry-batch-size W (repeatable) adds a
Gantry side with `batch_size: W` (its /encode merging follows it) beside the
executor's own default. --priority adds a Gantry side whose /encode has two
priority levels (`priority_levels: 2`, merged at the default side's pass
width, read from its GET /info): the bulk clients post as before, the
one-text client posts Jina's POST /post with `parameters: {priority: 1}`.
--out FILE.tsv writes one row per side and round.

  python3 bench/encoder/tail_under_bulk.py [--build-dir DIR] [--dtype float32|bfloat16]
      [--threads T] [--rounds R] [--seconds S] [--idle-seconds S]
      [--bulk-concurrency C] [--bulk-request-size N] [--gantry-batch-size W ...]
      [--priority] [--no-infinity] [--out FILE.tsv]

Needs bin/gantry and bin/gantry_loadgen in the build folder, the model
(scripts/fetch_model.sh or $GANTRY_MODEL_PATH) and, for Infinity, the venv
bench/encoder/infinity_venv.sh makes (run here when missing).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from embedding_servers import (MODEL_NAME, ROOT, Server, die_with_parent, gantry_side, free_port,
                               infinity_side, parse_checked, pass_width, post_ok,
                               server_env, write_tsv)

BULK_TEXT = 'Using a GPU allows you to significantly speed up encoding.'
PROBE_TEXT = 'How do I make encoding faster?'


def loadgen_cmd(loadgen, port, path, body_file, concurrency, warmup_ms, window_ms, label):
    return [loadgen, '--address', f'127.0.0.1:{port}', '--mode', 'http',
            '--http-path', path, '--http-body-file', body_file, '--http-expect', '"embedding"',
            '--concurrency', str(concurrency), '--warmup-ms', str(warmup_ms),
            '--window-ms', str(window_ms), '--max-windows', '1', '--stable', '1',
            '--timeout-ms', '60000', '--label', label]


def result_of(output: str, what: str) -> dict:
    for line in output.splitlines():
        if line.startswith('RESULT '):
            return json.loads(line[len('RESULT '):])
    raise RuntimeError(f'{what}: gantry_loadgen printed no RESULT line:\n{output[-2000:]}')


def run_loadgen(cmd, limit_s, what):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s,
                          preexec_fn=die_with_parent)
    if done.returncode != 0:
        raise RuntimeError(f'{what} failed (exit {done.returncode}):\n{done.stderr[-2000:]}')
    return result_of(done.stdout, what)


def measure(side, args, loadgen, tmp):
    """Starts side's server, measures it, stops it; returns a row of figures."""
    port = free_port()
    log_path = os.path.join(tmp, f'{side["label"]}.log')
    probe_path, probe_body, probe_file = side.get('probe', (side['path'], args.probe_body,
                                                            args.probe_file))
    with Server(side['label'], side['cmd'](port), side['env'], port, side['path'],
                log_path) as server:
        startup = server.wait_ready(args.bulk_body)
        for _ in range(8):  # warm-up: the first passes meet new shapes
            if not (post_ok(port, side['path'], args.bulk_body) and
                    post_ok(port, probe_path, probe_body)):
                raise RuntimeError(f'{side["label"]}: a warm-up post failed; log: {log_path}')
        if side['label'] == 'gantry':
            args.gantry_pass_width = pass_width(port)
        idle = run_loadgen(
            loadgen_cmd(loadgen, port, probe_path, probe_file, 1, 500,
                        int(args.idle_seconds * 1000), side['label'] + ' idle'),
            args.idle_seconds + 60, f'{side["label"]}: the idle one-text client')
        bulk_warmup_ms = 1500
        bulk = subprocess.Popen(
            loadgen_cmd(loadgen, port, side['path'], args.bulk_file, args.bulk_concurrency,
                        bulk_warmup_ms, int((args.seconds + 2.5) * 1000),
                        side['label'] + ' bulk'),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=die_with_parent)
        try:
            time.sleep(bulk_warmup_ms / 1000 + 0.5)
            probe = run_loadgen(
                loadgen_cmd(loadgen, port, probe_path, probe_file, 1, 1000,
                            int(args.seconds * 1000), side['label'] + ' probe'),
                args.seconds + 60, f'{side["label"]}: the one-text client under load')
            out, err = bulk.communicate(timeout=args.seconds + 120)
        finally:
            if bulk.poll() is None:
                bulk.kill()
                bulk.communicate()
        if bulk.returncode != 0:
            raise RuntimeError(f'{side["label"]}: the bulk clients failed (exit '
                               f'{bulk.returncode}):\n{err[-2000:]}')
        bulk_result = result_of(out, f'{side["label"]}: the bulk clients')
    return {
        'side': side['label'],
        'startup_s': startup,
        'idle_p50_ms': idle['p50_us'] / 1000,
        'idle_p99_ms': idle['p99_us'] / 1000,
        'probe_p50_ms': probe['p50_us'] / 1000,
        'probe_p99_ms': probe['p99_us'] / 1000,
        'probe_requests': probe['requests'],
        'bulk_docs_per_s': bulk_result['req_per_s'] * args.bulk_request_size,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--build-dir', default=os.environ.get('GANTRY_BUILD_DIR',
                                                              os.path.join(ROOT, 'build')))
    parser.add_argument('--dtype', default='bfloat16', choices=['float32', 'bfloat16'])
    parser.add_argument('--threads', type=int, default=os.cpu_count(),
                        help="OMP_NUM_THREADS for both servers (default: one per core)")
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--seconds', type=float, default=8.0)
    parser.add_argument('--idle-seconds', type=float, default=3.0)
    parser.add_argument('--bulk-concurrency', type=int, default=16)
    parser.add_argument('--bulk-request-size', type=int, default=32)
    parser.add_argument('--gantry-batch-size', type=int, action='append', default=[])
    parser.add_argument('--priority', action='store_true')
    parser.add_argument('--no-infinity', action='store_true')
    parser.add_argument('--out', default='')
    args = parse_checked(parser, [('--threads', 1, 256), ('--rounds', 1, 100),
                                  ('--bulk-concurrency', 1, 512), ('--bulk-request-size', 1, 2048),
                                  ('--gantry-batch-size', 1, 2048), ('--seconds', 1, 600),
                                  ('--idle-seconds', 1, 600)])
    gantry = os.path.join(args.build_dir, 'bin', 'gantry')
    loadgen = os.path.join(args.build_dir, 'bin', 'gantry_loadgen')
    env = server_env('tail_under_bulk', [gantry, loadgen], args.threads)
    if env is None:
        return 2
    model = env['GANTRY_MODEL_PATH']

    with tempfile.TemporaryDirectory(prefix='tail-under-bulk-') as tmp:
        args.bulk_body = json.dumps({'model': MODEL_NAME,
                                     'input': [BULK_TEXT] * args.bulk_request_size}).encode()
        args.probe_body = json.dumps({'model': MODEL_NAME, 'input': [PROBE_TEXT]}).encode()
        args.bulk_file = os.path.join(tmp, 'bulk.json')
        args.probe_file = os.path.join(tmp, 'probe.json')
        with open(args.bulk_file, 'wb') as f:
            f.write(args.bulk_body)
        with open(args.probe_file, 'wb') as f:
            f.write(args.probe_body)
        # The default side first: the priority side reads its pass width.
        sides = [gantry_side(args, gantry, model, env, tmp)]
        sides += [gantry_side(args, gantry, model, env, tmp, w) for w in args.gantry_batch_size]
        if args.priority:
            # The one-text client posts Jina's body, the only one with parameters.
            body = json.dumps({'data': [{'text': PROBE_TEXT}], 'execEndpoint': '/encode',
                               'parameters': {'priority': 1}}).encode()
            body_file = os.path.join(tmp, 'probe-priority.json')
            with open(body_file, 'wb') as f:
                f.write(body)
            sides.append(dict(gantry_side(args, gantry, model, env, tmp, priority=True),
                              probe=('/post', body, body_file)))
        if not args.no_infinity:
            sides.append(infinity_side(args, model, env))
        rows = []
        try:
            for r in range(args.rounds):
                order = sides[r % len(sides):] + sides[:r % len(sides)]
                for side in order:
                    row = measure(side, args, loadgen, tmp)
                    row['round'] = r + 1
                    rows.append(row)
                    print(f'round {r + 1} {row["side"]}: one text idle p50 '
                          f'{row["idle_p50_ms"]:.1f} ms; under load p50 '
                          f'{row["probe_p50_ms"]:.1f} ms, p99 {row["probe_p99_ms"]:.1f} ms '
                          f'({row["probe_requests"]} requests); bulk '
                          f'{row["bulk_docs_per_s"]:.1f} docs/s', flush=True)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f'tail_under_bulk: {e}', file=sys.stderr)
            return 1

    keys = ['idle_p50_ms', 'idle_p99_ms', 'probe_p50_ms', 'probe_p99_ms', 'bulk_docs_per_s']
    medians = {}
    for side in sides:
        mine = [row for row in rows if row['side'] == side['label']]
        medians[side['label']] = {k: statistics.median(row[k] for row in mine) for k in keys}
    print(f'\n{args.dtype}, {args.threads} threads, {args.bulk_concurrency} bulk clients x '
          f'{args.bulk_request_size} texts, {args.rounds} rounds of {args.seconds:g} s '
          f'(medians)')
    print(f'{"side":<17}{"idle p50 ms":>12}{"idle p99 ms":>12}{"load p50 ms":>12}'
          f'{"load p99 ms":>12}{"bulk docs/s":>13}')
    for label, m in medians.items():
        print(f'{label:<17}{m["idle_p50_ms"]:>12.1f}{m["idle_p99_ms"]:>12.1f}'
              f'{m["probe_p50_ms"]:>12.1f}{m["probe_p99_ms"]:>12.1f}'
              f'{m["bulk_docs_per_s"]:>13.1f}')
    fewest = min(row['probe_requests'] for row in rows)
    if fewest < 50:
        print(f'note: a side answered only {fewest} one-text requests under load in a round; '
              'its p99 is close to its maximum (a longer --seconds gives more)')
    if 'infinity' in medians:
        g, i = medians['gantry'], medians['infinity']
        print(f'infinity / gantry: idle p50 {i["idle_p50_ms"] / g["idle_p50_ms"]:.2f}, '
              f'under load p50 {i["probe_p50_ms"] / g["probe_p50_ms"]:.2f}, '
              f'p99 {i["probe_p99_ms"] / g["probe_p99_ms"]:.2f}; '
              f'gantry / infinity bulk docs/s {g["bulk_docs_per_s"] / i["bulk_docs_per_s"]:.2f}')
    if 'gantry-priority' in medians:
        g, p = medians['gantry'], medians['gantry-priority']
        print(f'gantry / gantry-priority: under load p50 '
              f'{g["probe_p50_ms"] / p["probe_p50_ms"]:.2f}, p99 '
              f'{g["probe_p99_ms"] / p["probe_p99_ms"]:.2f}; bulk docs/s '
              f'{p["bulk_docs_per_s"] / g["bulk_docs_per_s"]:.2f} of the default\'s')
    if args.out:
        write_tsv(args.out, ['round', 'side', 'startup_s'] + keys + ['probe_requests'], rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
