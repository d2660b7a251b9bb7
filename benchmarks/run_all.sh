#!/usr/bin/env bash
# Reproduces benchmarks/RESULTS.md: every script, each with its same-run baseline or peer,
# logged with its command and the date and load average before and after. Usage (from anywhere):
#   bash benchmarks/run_all.sh [--quick] [OUT_DIR] [names...]
# names: generate grpo_step train_step forward async_vs_sync speculative long_context sandbox
#        gateway lora_step dot_speed decode_chunk paged_decode real_model real_model_agentic (default: all). --quick: fewer repeats and sizes (the RESULTS rows
#        marked quick), for a loaded machine; ratios stay same-run.
# Peers: Tunix 0.1.7 in its own venv (benchmarks/peers/setup_tunix.sh makes it under
# $AGENTRL_CACHE or /tmp on first use) and transformers' generate from our environment.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ "${1:-}" == "--quick" ]]; then
  quick=1
  shift
fi
out="${1:-${TMPDIR:-/tmp}/agentrl-bench-$(date +%Y%m%d-%H%M%S)}"
shift || true
mkdir -p "$out"
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(generate grpo_step train_step forward async_vs_sync speculative
  long_context sandbox gateway lora_step dot_speed decode_chunk paged_decode real_model
  real_model_agentic)

# name -> "script and its full flags | its --quick flags"
declare -A runs=(
  [generate]="generate.py --repeats=3 --peers=tunix,transformers | --repeats=3 --naive_tokens=2 --peers=tunix"
  [grpo_step]="grpo_step.py --repeats=3 --peers=tunix | --repeats=1 --no_plain --peers=tunix"
  [train_step]="train_step.py | --steps=3"
  [forward]="forward.py | --steps=2"
  [async_vs_sync]="async_vs_sync.py | --steps=8"
  [speculative]="speculative_trained.py | --repeats=1"
  [long_context]="long_context.py | --seq_lens=4096,8192"
  [sandbox]="sandbox.py --backends=bwrap,docker | --backends=bwrap --cycles=20 --conc_cycles=16 --snapshots=5"
  [gateway]="gateway.py --repeats=3 | --repeats=1"
  [lora_step]="lora_step.py | --steps=2"
  [dot_speed]="dot_speed.py | --flags="
  [decode_chunk]="decode_chunk.py | --concurrency=1,8 --chunks=8,32"
  [paged_decode]="paged_decode.py | --repeats=3 --slots=1,32 --contexts=256,1024 --engine_slots=32 --engine_contexts=256"
  [real_model]="real_model.py --parts hf,tunix,decode,first_token,update | --quick --parts hf,first_token"
  [real_model_agentic]="real_model_agentic.py | --tasks=4 --turns=1"
)
summary="$out/summary.md"
echo "# agentrl benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null)" >"$summary"
bash benchmarks/peers/setup_tunix.sh >/dev/null || { echo "Tunix venv failed" >&2; exit 1; }
rc=0
for n in "${names[@]}"; do
  spec="${runs[$n]:-}"
  [[ -n "$spec" ]] || { echo "run_all.sh: unknown benchmark $n" >&2; exit 2; }
  if ((quick)); then cmd="${spec%% *} ${spec#*| }"; else cmd="${spec%% |*}"; fi
  cmd="benchmarks/$cmd"
  log="$out/$n.log"
  {
    echo "command: python $cmd"
    echo "start: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  $(uptime)"
  } >"$log"
  # word splitting of $cmd is wanted: it holds the script and its flags
  # shellcheck disable=SC2086
  python $cmd >>"$log" 2>"$out/$n.stderr" || { echo "exit $?" >>"$log"; rc=1; }
  echo "end: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  $(uptime)" >>"$log"
  # The table's rows: each script's own report (its last lines), with command, date and load.
  {
    printf '\n## %s\n\n```\n' "$n"
    head -n 2 "$log"
    tail -n 40 "$log" | grep -v '^command: \|^start: '
    printf '```\n'
  } >>"$summary"
  echo "$n -> $log"
done
echo "summary -> $summary"
exit $rc
