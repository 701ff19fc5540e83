"""Side (d) of bench/encoder/run.sh: Infinity (PyPI infinity-emb) serving the
same model folder with its torch engine on the CPU. Starts `infinity_emb v2`
on 127.0.0.1, posts N copies of the tutorial sentence to its OpenAI-style
POST /embeddings in requests of 32 inputs, CONCURRENCY requests in flight
(Infinity batches what is queued, up to --batch-size), checks every input
got a 384-d embedding, and prints a line in encode_10k's format:
  docs_per_s=<v> n=<N> seconds=<post time> startup_seconds=<v> ...

  python infinity_encode.py --model-path DIR [--docs N] [--dtype float32|bfloat16]
                            [--concurrency C] [--port P]
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

SENTENCE = 'Using a GPU allows you to significantly speed up encoding.'
REQUEST_SIZE = 32
MODEL_NAME = 'all-MiniLM-L6-v2'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_healthy(port: int, server: subprocess.Popen, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f'infinity_emb exited with {server.returncode} before it was ready')
        try:
            conn = http.client.HTTPConnection('127.0.0.1', port, timeout=2)
            conn.request('GET', '/health')
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f'infinity_emb was not healthy within {limit_s:.0f} s')


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('--model-path', required=True)
    parser.add_argument('--docs', type=int, default=10000)
    parser.add_argument('--dtype', default='float32', choices=['float32', 'bfloat16'])
    parser.add_argument('--concurrency', type=int, default=8)
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--no-progress', action='store_true')  # run.sh passes it to every side
    args = parser.parse_args()
    port = args.port or free_port()
    exe = os.path.join(os.path.dirname(sys.executable), 'infinity_emb')
    cmd = [exe, 'v2', '--model-id', args.model_path, '--served-model-name', MODEL_NAME,
           '--engine', 'torch', '--device', 'cpu', '--dtype', args.dtype,
           '--batch-size', str(REQUEST_SIZE), '--host', '127.0.0.1', '--port', str(port),
           '--no-bettertransformer']
    start = time.perf_counter()
    server = subprocess.Popen(cmd, stdout=sys.stderr, stderr=sys.stderr, start_new_session=True)
    try:
        wait_healthy(port, server, 300)
        startup = time.perf_counter() - start
        body = json.dumps({'model': MODEL_NAME, 'input': [SENTENCE] * REQUEST_SIZE}).encode()
        requests = [REQUEST_SIZE] * (args.docs // REQUEST_SIZE)
        if args.docs % REQUEST_SIZE:
            requests.append(args.docs % REQUEST_SIZE)

        def post(n: int) -> int:
            payload = body if n == REQUEST_SIZE else json.dumps(
                {'model': MODEL_NAME, 'input': [SENTENCE] * n}).encode()
            conn = http.client.HTTPConnection('127.0.0.1', port, timeout=120)
            conn.request('POST', '/embeddings', payload, {'Content-Type': 'application/json'})
            reply = conn.getresponse()
            data = json.loads(reply.read())
            conn.close()
            if reply.status != 200:
                raise RuntimeError(f'POST /embeddings: HTTP {reply.status}: {data}')
            got = [d['embedding'] for d in data['data']]
            if len(got) != n or any(len(e) != 384 for e in got):
                raise RuntimeError(f'asked for {n} embeddings of 384, got {len(got)}')
            return n

        post_start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            done = sum(pool.map(post, requests))
        seconds = time.perf_counter() - post_start
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
    if done != args.docs:
        print(f'infinity_encode: posted {args.docs} docs, got {done} back', file=sys.stderr)
        return 1
    print(f'encoded {done} documents in {seconds:.2f} s: {done / seconds:.1f} docs/s '
          f'(startup {startup:.2f} s)')
    print(f'docs_per_s={done / seconds:.1f} n={done} seconds={seconds:.3f} '
          f'startup_seconds={startup:.3f} request_size={REQUEST_SIZE} '
          f'concurrency={args.concurrency} dtype={args.dtype} device=cpu')
    return 0


if __name__ == '__main__':
    sys.exit(main())
