#!/usr/bin/env bash
# The shop example's whole loop, with the documented commands only (docs: "Your own agent"):
# production traffic -> lake -> scenarios, SFT, GRPO, gate, publish (`trajlake pipeline`) ->
# the adapter serves new customers -> compared with the production LLM on the same questions.
#
#   examples/shop/run.sh [WORKDIR]         (default ./shop-run; it must not hold a lake yet)
#
# Sizes: SHOP_RUNS customers per batch (240). SHOP_SERVE: the version to serve
# (shop-agent:production: what the gate promoted; nothing to serve if it refused). Ports: SHOP_COLLECTOR_PORT (4318),
# SHOP_LLM_PORT (8001), SHOP_ADAPTER_PORT (8000). Any setting of trajlake.toml can be changed
# by the environment (TRAJLAKE_PIPELINE__ROUNDS=1, TRAJLAKE_TRAIN__SFT__MAX_STEPS=2, ...).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mkdir -p "${1:-shop-run}" && cd "${1:-shop-run}" && pwd)
RUNS=${SHOP_RUNS:-240}
SERVE=${SHOP_SERVE:-shop-agent:production}
COLLECTOR=http://127.0.0.1:${SHOP_COLLECTOR_PORT:-4318}
LLM=http://127.0.0.1:${SHOP_LLM_PORT:-8001}
ADAPTER=http://127.0.0.1:${SHOP_ADAPTER_PORT:-8000}
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"  # the agent, its tools and its reward: `shop.*`
export TRAJLAKE_CONFIG="$WORK/trajlake.toml"
cd "$WORK"
[ -e trajlake.toml ] || cp "$HERE/trajlake.toml" .

PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; wait; }
trap cleanup EXIT
wait_for() {  # URL PID: poll until the server answers (they take a few seconds to import)
  for _ in $(seq 600); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$2" 2>/dev/null || { echo "error: the server for $1 exited (its error is above)" >&2; return 1; }
    sleep 0.5
  done
  echo "error: $1 did not answer in 300 s" >&2; return 1
}
stop() {  # PID: SIGTERM and wait (the collector writes and assembles what it holds on the way out)
  kill "$1"; wait "$1" || true
}
step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "0. the configuration resolves every reward, tool and selection"
trajlake config --check >/dev/null

step "1. production: $RUNS customers, the production LLM, traces and feedback into the lake"
python -m shop.production_llm --port "${LLM##*:}" --seed 0 & PIDS+=($!); LLM_PID=$!
trajlake collect --port "${COLLECTOR##*:}" --flush-seconds 1 & PIDS+=($!); COLLECT_PID=$!
wait_for "$LLM/v1/models" "$LLM_PID"; wait_for "$COLLECTOR/health" "$COLLECT_PID"
python -m shop.agent --llm "$LLM/v1" --model shop-llm-prod --collector "$COLLECTOR" \
  --runs "$RUNS" --seed 0 --out production.jsonl
stop "$COLLECT_PID"

step "2. what arrived"
trajlake sql "SELECT agent_name, model, count(*) AS runs FROM trajectories GROUP BY ALL"
trajlake sql "SELECT name, value, count(*) AS n FROM latest_rewards GROUP BY ALL ORDER BY ALL"
trajlake sql "SELECT count(*) AS labels FROM labels WHERE expected IS NOT NULL"

step "3. the nightly loop once: scenarios, SFT, replay/score/GRPO, evaluation, the gate, publish"
trajlake pipeline
trajlake sql "SELECT rated, expected_source, split, count(*) AS n FROM scenarios GROUP BY ALL ORDER BY ALL"
trajlake sql "SELECT name, version, aliases FROM adapters"

step "4. $SERVE serves $RUNS new customers; the production LLM answers the same questions"
trajlake collect --port "${COLLECTOR##*:}" --flush-seconds 1 & PIDS+=($!); COLLECT_PID=$!
trajlake serve-sampler --adapter "$SERVE" --port "${ADAPTER##*:}" \
  --temperature 0 --max-tokens 48 & PIDS+=($!); SERVE_PID=$!
wait_for "$COLLECTOR/health" "$COLLECT_PID"; wait_for "$ADAPTER/v1/models" "$SERVE_PID"
SERVED=$(curl -sf "$ADAPTER/v1/models" | python -c \
  "import json, sys; print(next(m['id'] for m in json.load(sys.stdin)['data'] if m['id'].startswith('shop-agent-v')))")
python -m shop.agent --llm "$ADAPTER/v1" --model "$SERVED" --collector "$COLLECTOR" \
  --runs "$RUNS" --seed 1 --concurrency 16 --out adapter.jsonl
python -m shop.agent --llm "$LLM/v1" --model shop-llm-prod --collector "$COLLECTOR" \
  --runs "$RUNS" --seed 1 --out production-new.jsonl
stop "$SERVE_PID"; stop "$COLLECT_PID"; stop "$LLM_PID"

step "5. compare: the same new questions, paired; and production per policy from the lake"
python -m shop.compare production-new.jsonl adapter.jsonl | tee comparison.md
trajlake sql "SELECT policy, adapter_version, sum(trajectories) AS runs, round(sum(mean * trajectories) / sum(trajectories), 3) AS feedback FROM policy_performance WHERE name = 'user_feedback' GROUP BY ALL ORDER BY ALL"
trajlake report -o report.html
echo "report: $WORK/report.html"
