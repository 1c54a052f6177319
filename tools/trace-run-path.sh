#!/usr/bin/env bash
# The path `ufp4 run MANIFEST --force` takes from the command line to the results file, traced by a
# debugger: a breakpoint on each function that resolves, prepares or trains the run (and on the recipe
# and model lookups, which a run makes once), listed in the order the run reaches them, with how often.
#   tools/trace-run-path.sh MANIFEST        (needs gdb and a build in build/; trains the run once more)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: tools/trace-run-path.sh MANIFEST" >&2; exit 2; }
command -v gdb >/dev/null || { echo "trace-run-path: gdb is not installed" >&2; exit 2; }
cmds=$(mktemp)
trap 'rm -f "$cmds"' EXIT
{
  echo "set pagination off"
  for f in cli_main cmd_run RunManifest::expand plan_run model_config Recipe::load prepare_plans ensure_data settle_data train_queue \
           run_training find_results Trainer::Trainer Trainer::train Trainer::results write_run_results; do
    echo "break ufp4::$f"
  done
  echo "run"
  for _ in $(seq 1 80); do echo "bt 1"; echo "continue"; done
} > "$cmds"
gdb -batch -x "$cmds" --args build/ufp4 run "$1" --force 2>&1 | grep -E "^#0 " | sed -E 's/^#0 +(0x[0-9a-f]+ in )?//; s/\(.*//' | uniq -c
