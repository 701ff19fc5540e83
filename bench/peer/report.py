"""Turns bench/peer/run.sh's results.jsonl into report.md and throughput.png.

    python report.py RESULTS.jsonl OUT_DIR

Every ratio is Gantry / Jina from the same run. For throughput higher is
better; for latency, cold start and memory lower is better.
"""
import json
import statistics
import sys
from pathlib import Path


def load(path):
    rows = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line.startswith('{'):
            rows.append(json.loads(line))
    return rows


def pick(rows, **match):
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def one(rows, key, **match):
    found = pick(rows, **match)
    return found[-1].get(key) if found else None


def fmt(value, digits=0):
    if value is None:
        return 'n/a'
    if isinstance(value, float) and digits == 0 and abs(value) < 10:
        digits = 2
    return f'{value:,.{digits}f}'


def ratio(g, j):
    if g is None or j is None or j == 0:
        return 'n/a'
    return f'{g / j:.3g}x'


def main():
    rows = load(sys.argv[1])
    out = Path(sys.argv[2])
    machine = (pick(rows, mode='machine') or [{}])[0]
    table = []  # (metric, gantry, jina, ratio)

    def add(metric, g, j, digits=0):
        table.append((metric, fmt(g, digits), fmt(j, digits), ratio(g, j)))

    levels = sorted({r['concurrency'] for r in pick(rows, mode='unary', label='gantry')})
    for mode in ('unary', 'stream'):
        for c in levels:
            add(f'{mode} 1-doc req/s, concurrency {c}',
                one(rows, 'req_per_s', mode=mode, label='gantry', concurrency=c),
                one(rows, 'req_per_s', mode=mode, label='jina', concurrency=c))
    for p in ('p50_us', 'p90_us', 'p99_us'):
        add(f'unary 1-doc latency {p[:3]} at c=1 (us)',
            one(rows, p, mode='unary', label='gantry', concurrency=1),
            one(rows, p, mode='unary', label='jina', concurrency=1), 1)
    for key, name in (('client_serialize_us', 'client serialize'),
                      ('client_deserialize_us', 'client deserialize')):
        add(f'{name}, mean at c=1 (us, same C++ client)',
            one(rows, key, mode='unary', label='gantry', concurrency=1),
            one(rows, key, mode='unary', label='jina', concurrency=1), 1)
    # Not the same span on both sides, so no ratio: Gantry's worker stamps
    # its own route around the handler; Jina's gateway stamps the executor's
    # route around its gateway -> worker -> gateway call.
    table.append(('executor route span at c=1 (us): Gantry = handler in the worker, '
                  'Jina = gateway->worker->gateway',
                  fmt(one(rows, 'handler_route_us', mode='unary', label='gantry', concurrency=1), 1),
                  fmt(one(rows, 'handler_route_us', mode='unary', label='jina', concurrency=1), 1),
                  'not comparable'))
    add('worker alone (no gateway) p50 at c=1 (us)',
        one(rows, 'p50_us', mode='unary', label='gantry-direct', concurrency=1),
        one(rows, 'p50_us', mode='unary', label='jina-direct', concurrency=1), 1)
    hop = {}
    for sys_name in ('gantry', 'jina'):
        via = one(rows, 'p50_us', mode='unary', label=sys_name, concurrency=1)
        direct = one(rows, 'p50_us', mode='unary', label=f'{sys_name}-direct', concurrency=1)
        hop[sys_name] = via - direct if via is not None and direct is not None else None
    add('gateway hop = p50 via gateway - p50 direct (us)', hop['gantry'], hop['jina'], 1)
    add('worker alone req/s at c=16',
        one(rows, 'req_per_s', mode='unary', label='gantry-direct', concurrency=16),
        one(rows, 'req_per_s', mode='unary', label='jina-direct', concurrency=16))
    add('seed job docs/s (10,000 docs, request_size 32, C++ Client)',
        one(rows, 'docs_per_s', mode='post', label='gantry'),
        one(rows, 'docs_per_s', mode='post', label='jina'))
    add('seed job docs/s (same, Jina Python client)',
        one(rows, 'docs_per_s', mode='jina_client_post', label='gantry'),
        one(rows, 'docs_per_s', mode='jina_client_post', label='jina'))

    cold = {}
    for sys_name in ('gantry', 'jina'):
        values = [r['cold_start_ms'] for r in pick(rows, mode='probe', label=sys_name)]
        cold[sys_name] = values
    med = {k: statistics.median(v) if v else None for k, v in cold.items()}
    add(f'cold start to first reply, median of {len(cold["gantry"])} (ms)',
        med['gantry'], med['jina'], 1)
    add('cold start, min (ms)', min(cold['gantry'], default=None),
        min(cold['jina'], default=None), 1)

    def mem(label, phase, role, key):
        found = pick(rows, mode='memory', label=label, phase=phase, role=role)
        if not found or any(key not in r for r in found):
            return None
        return sum(r[key] for r in found) / 1024.0

    for phase in ('idle', 'after_load'):
        add(f'gateway RSS, {phase} (MB)', mem('gantry', phase, 'gateway', 'rss_kb'),
            mem('jina', phase, 'gateway', 'rss_kb'), 1)
    for role in ('gateway', 'worker'):
        for key, what in (('anon_kb', 'private heap (RssAnon)'), ('file_kb', 'file-backed (RssFile)')):
            add(f'{role} {what} after load (MB)', mem('gantry', 'after_load', role, key),
                mem('jina', 'after_load', role, key), 1)
    add('gateway peak RSS (VmHWM, MB)', mem('gantry', 'after_load', 'gateway', 'hwm_kb'),
        mem('jina', 'after_load', 'gateway', 'hwm_kb'), 1)
    for phase in ('idle', 'after_load'):
        add(f'worker RSS, {phase} (MB)', mem('gantry', phase, 'worker', 'rss_kb'),
            mem('jina', phase, 'worker', 'rss_kb'), 1)
    add('worker peak RSS (VmHWM, MB)', mem('gantry', 'after_load', 'worker', 'hwm_kb'),
        mem('jina', 'after_load', 'worker', 'hwm_kb'), 1)

    torch_cold = [r['cold_start_ms'] for r in pick(rows, mode='probe', label='gantry-torch')]
    if torch_cold:
        add('cold start with the libtorch-linked gantry-worker (MyGPUExec, CPU, no model), '
            'median (ms)', statistics.median(torch_cold), med['jina'], 1)
        add('libtorch-linked gantry-worker RSS, idle (MB)',
            mem('gantry-torch', 'idle', 'worker', 'rss_kb'), mem('jina', 'idle', 'worker', 'rss_kb'),
            1)

    encoder_rss = mem('gantry-encoder', 'idle', 'worker', 'rss_kb')
    if encoder_rss is not None:
        add('SentenceEncoder replica (all-MiniLM-L6-v2, CPU, float32) RSS, idle (MB)', encoder_rss,
            None, 1)
        add('SentenceEncoder replica private heap (RssAnon), idle (MB)',
            mem('gantry-encoder', 'idle', 'worker', 'anon_kb'), None, 1)

    def total(label):
        found = pick(rows, mode='memory', label=label, phase='idle')
        return sum(r['rss_kb'] for r in found) / 1024.0 if found else None

    add('all processes of the deployment, idle RSS (MB)', total('gantry'), total('jina'), 1)
    add('threads: gateway + worker + main, idle',
        sum(r['threads'] for r in pick(rows, mode='memory', label='gantry', phase='idle')) or None,
        sum(r['threads'] for r in pick(rows, mode='memory', label='jina', phase='idle')) or None)

    # Goals of issue 6.
    g16 = one(rows, 'req_per_s', mode='unary', label='gantry', concurrency=16)
    j16 = one(rows, 'req_per_s', mode='unary', label='jina', concurrency=16)
    p50 = one(rows, 'p50_us', mode='unary', label='gantry', concurrency=1)
    gw_rss = mem('gantry', 'after_load', 'gateway', 'hwm_kb')
    wk_rss = mem('gantry', 'idle', 'worker', 'rss_kb')
    goals = []

    def goal(name, value, target, ok, unit=''):
        goals.append((name, value, target, 'met' if ok else 'MISSED'))

    if g16 is not None and j16:
        goal('req/s at concurrency 16 >= 10x Jina', f'{g16 / j16:.1f}x', '>= 10x', g16 / j16 >= 10)
    if p50 is not None:
        goal('p50 1-doc latency client->gateway->worker->client', f'{p50:.0f} us', '<= 150 us',
             p50 <= 150)
    if med['gantry'] is not None:
        goal('cold start', f'{med["gantry"]:.0f} ms', '<= 300 ms', med['gantry'] <= 300)
        if med['jina']:
            goal('cold start vs Jina', f'{med["jina"] / med["gantry"]:.1f}x faster', '>= 10x',
                 med['jina'] / med['gantry'] >= 10)
    if gw_rss is not None:
        goal('gateway RSS (peak)', f'{gw_rss:.1f} MB', '<= 20 MB', gw_rss <= 20)
    if wk_rss is not None:
        goal('idle worker RSS, no model', f'{wk_rss:.1f} MB', '<= 60 MB', wk_rss <= 60)
    torch_rss = mem('gantry-torch', 'idle', 'worker', 'rss_kb')
    if torch_rss is not None:
        goal('idle libtorch-linked worker RSS, no model (MyGPUExec, CPU)', f'{torch_rss:.1f} MB',
             '<= 250 MB', torch_rss <= 250)
    if encoder_rss is not None:
        goal('idle SentenceEncoder replica RSS (CPU)', f'{encoder_rss:.1f} MB', '<= 300 MB',
             encoder_rss <= 300)

    # Against bare gRPC (bench/grpc_floor) under the same client: how much of
    # each hop is Gantry's and how much is gRPC's own on this machine.
    floor_rows = []

    def floor(what, label, peer_label):
        for key, name, digits in (('p50_us', 'p50 at c=1 (us)', 1),
                                  ('req_per_s', 'req/s at c=16', 0)):
            c = 1 if key == 'p50_us' else 16
            g = one(rows, key, mode='unary', label=label, concurrency=c)
            f = one(rows, key, mode='unary', label=peer_label, concurrency=c)
            if g is not None or f is not None:
                floor_rows.append((f'{what}: {name}', fmt(g, digits), fmt(f, digits), ratio(g, f)))

    floor('one hop: Gantry worker / bare sync echo', 'gantry-direct', 'floor-sync')
    floor('one hop: bare callback echo (no protobuf) / bare sync echo', 'floor-callback',
          'floor-sync')
    floor('two hops: bare async relay + echo / bare relay + echo', 'floor-relay-async',
          'floor-relay')
    floor('two hops: Gantry gateway + worker / bare relay + echo', 'gantry', 'floor-relay')
    floor('two hops: Gantry gateway + bare echo / bare relay + echo', 'gantry-gateway-echo',
          'floor-relay')
    floor('two hops: bare relay + Gantry worker / bare relay + echo', 'relay-gantry-worker',
          'floor-relay')
    relay_p50 = one(rows, 'p50_us', mode='unary', label='floor-relay', concurrency=1)
    if relay_p50 is not None:
        goal('bare gRPC, two hops (relay + echo), p50 at c=1: the floor under the goal above',
             f'{relay_p50:.0f} us', '<= 150 us', relay_p50 <= 150)

    lines = [
        f'Machine: {machine.get("cores")} cores ({machine.get("cpu")}), kernel '
        f'{machine.get("kernel")}, load average at start {machine.get("load1")}; '
        f'worker program: {machine.get("worker")}; quick mode: {bool(machine.get("quick"))}; '
        f'cpuidle driver: {machine.get("cpuidle", "not recorded")}'
        + (f' (guest_halt_poll_ns {machine["guest_halt_poll_ns"]})'
           if machine.get('guest_halt_poll_ns') else '') + '.',
        '',
        '| metric | Gantry | Jina | Gantry/Jina |',
        '|---|---:|---:|---:|',
    ]
    lines += [f'| {m} | {g} | {j} | {r} |' for m, g, j, r in table]
    if floor_rows:
        lines += ['', '| against bare gRPC (same client, same run) | Gantry or as named | bare gRPC '
                  '| ratio |', '|---|---:|---:|---:|']
        lines += [f'| {m} | {g} | {f} | {r} |' for m, g, f, r in floor_rows]
    lines += ['', '| goal | measured | target | |', '|---|---:|---:|---|']
    lines += [f'| {n} | {v} | {t} | {s} |' for n, v, t, s in goals]
    errors = [r for r in rows if r.get('errors')]
    if errors:
        lines += ['', 'Errors seen:']
        lines += [f'- {r["label"]} {r["mode"]} c={r["concurrency"]}: {r["errors"]} '
                  f'({r.get("first_error", "")})' for r in errors]
    unstable = [r for r in rows if r.get('stable') is False]
    if unstable:
        lines += ['', 'Not stable within the window bound: ' + ', '.join(
            f'{r["label"]} {r["mode"]} c={r["concurrency"]}' for r in unstable)]
    (out / 'report.md').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))

    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('report.py: matplotlib not installed; no plot', file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {'gantry': ('tab:blue', 'Gantry'), 'jina': ('tab:orange', 'Jina 3.34')}
    for label, (color, name) in styles.items():
        for mode, line in (('unary', '-o'), ('stream', '--s')):
            pts = sorted((r['concurrency'], r['req_per_s'])
                         for r in pick(rows, mode=mode, label=label))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], line, color=color,
                        label=f'{name}, {mode}')
    ax.set_xscale('log', base=2)
    ax.set_yscale('log')
    all_levels = sorted({r['concurrency'] for r in rows if r.get('mode') in ('unary', 'stream')})
    ax.set_xticks(all_levels)
    ax.set_xticklabels([str(c) for c in all_levels])
    ax.set_xlabel('concurrency (client threads, 1 request in flight each)')
    ax.set_ylabel('requests/s (1 doc each)')
    ax.set_title(f'NoOpExec, 1 replica, gRPC on loopback, {machine.get("cores")} cores')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / 'throughput.png', dpi=110)


if __name__ == '__main__':
    main()
