#!/usr/bin/env bash
# Issue 34: OTDD batches on a two-node Ray cluster started on loopback, as a user with
# several machines would start one (here both nodes are this machine, one CPU each).
#   bash benchmarks/ray_two_nodes.sh [N] [BATCH]
# Prints the cluster's nodes, runs `geoviz distance` with one Ray task per (reference,
# batch) pair on that cluster, then the same batches in this process, and stops the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-12000}
BATCH=${2:-3000}
DATA=${GEOVIZ_NIST_DIR:-../shared/data/nist}
PORT=6391
BIN=.venv/bin
export RAY_ADDRESS=127.0.0.1:$PORT
# Ray >= 2.59 authenticates every node and driver with one shared token: one for this
# cluster alone, in the environment of both nodes and of every driver below
export RAY_AUTH_MODE=token
RAY_AUTH_TOKEN=$($BIN/python -c 'import secrets; print(secrets.token_hex(32))')
export RAY_AUTH_TOKEN
trap '$BIN/ray stop --force >/dev/null 2>&1 || true' EXIT
$BIN/ray start --head --node-ip-address=127.0.0.1 --port=$PORT --num-cpus=1 --include-dashboard=false --disable-usage-stats >/dev/null
$BIN/ray start --address=127.0.0.1:$PORT --node-ip-address=127.0.0.1 --num-cpus=1 --disable-usage-stats >/dev/null
$BIN/python - <<'PY'
import ray
ray.init(address="auto", log_to_driver=False)
nodes = [n for n in ray.nodes() if n["Alive"]]
print(f"cluster: {len(nodes)} nodes alive, CPUs {[n['Resources'].get('CPU') for n in nodes]}")
PY
ARGS=(--target "$DATA/mnist.npz" --refs "$DATA/fashion_mnist.npz,$DATA/kmnist.npz" --n "$N" --batch-size "$BATCH" --no-cache --quiet)
# a watcher samples each node's free CPUs (a benchmark-only use of Ray's state module)
$BIN/python - > /tmp/geoviz_ray_nodes.txt <<'PY' &
import time, ray
from ray._private import state
ray.init(address="auto", log_to_driver=False)
busy = {}
deadline = time.time() + 3600
while time.time() < deadline:
    for node, free in state.available_resources_per_node().items():
        busy[node] = max(busy.get(node, 0.0), 1.0 - free.get("CPU", 0.0))  # no key: none free
    print({k[:8]: v for k, v in busy.items()}, flush=True)
    time.sleep(0.5)
PY
WATCH=$!
echo "== Ray tasks on the two-node cluster: geoviz distance ${ARGS[*]} --backend ray --ray-address $RAY_ADDRESS"
/usr/bin/time -f "wall %e s, driver peak %M KB" $BIN/python -m geoviz distance "${ARGS[@]}" --backend ray --ray-address "$RAY_ADDRESS" | tail -8
kill $WATCH
echo "most CPUs busy at once per node (node id: CPUs): $(tail -1 /tmp/geoviz_ray_nodes.txt)"
echo "== the same batches in this process: --backend sequential"
/usr/bin/time -f "wall %e s, peak %M KB" $BIN/python -m geoviz distance "${ARGS[@]}" --backend sequential | tail -8
