#!/usr/bin/env bash
# Reproduces benchmarks/RESULTS.md: every script, each with its same-run baseline or peer,
# logged with the date and load average before and after. Usage (from the repository root):
#   bash benchmarks/run_all.sh [OUT_DIR] [names...]   # names: generate grpo_step train_step
#                                                   # forward async_vs_sync speculative
#                                                   # long_context sandbox (default: all)
# Peers: Tunix 0.1.7 in its own venv (benchmarks/peers/setup_tunix.sh makes it under
# $AGENTRL_CACHE or /tmp on first use) and transformers' generate from our environment.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${TMPDIR:-/tmp}/agentrl-bench-$(date +%Y%m%d-%H%M%S)}"
shift || true
mkdir -p "$out"
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(generate grpo_step train_step forward async_vs_sync speculative long_context sandbox)

declare -A cmd=(
  [generate]="python benchmarks/generate.py --repeats=3 --peers=tunix,transformers --peer_repeats=2"
  [grpo_step]="python benchmarks/grpo_step.py --repeats=3 --peers=tunix"
  [train_step]="python benchmarks/train_step.py"
  [forward]="python benchmarks/forward.py"
  [async_vs_sync]="python benchmarks/async_vs_sync.py"
  [speculative]="python benchmarks/speculative_trained.py"
  [long_context]="python benchmarks/long_context.py"
  [sandbox]="python benchmarks/sandbox.py --backends=bwrap"
)
bash benchmarks/peers/setup_tunix.sh >/dev/null || { echo "Tunix venv failed" >&2; exit 1; }
rc=0
for n in "${names[@]}"; do
  [[ -n "${cmd[$n]:-}" ]] || { echo "run_all.sh: unknown benchmark $n" >&2; exit 2; }
  log="$out/$n.log"
  {
    echo "command: ${cmd[$n]}"
    echo "start: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  $(uptime)"
  } >"$log"
  ${cmd[$n]} >>"$log" 2>"$out/$n.stderr" || { echo "exit $?" >>"$log"; rc=1; }
  echo "end: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  $(uptime)" >>"$log"
  echo "$n -> $log"
done
exit $rc
