# Sourced by the one-call GPU scripts (tools/gpu-*.sh): strict mode, the repository root, a logs
# folder ($LOGS, default logs/$1), a clock since the start, and the build into $LOGS/build.log.
set -uo pipefail
# The GPU scripts check what they train: no run is copied from another folder (harness/plan/run_files.h).
export UFP4_REUSE=${UFP4_REUSE:-off}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOGS=${LOGS:-logs/$1}
mkdir -p "$LOGS"
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }
# UFP4_BUILT=1: this call already built (two scripts started side by side must not build one folder at once).
# On a warm node a carried .gpu-deps replaces the libraries `make gpu` unpacked there, and the binary no
# longer starts: then it builds again (seconds: nothing to compile).
if [ "${UFP4_BUILT:-0}" = 1 ] && ! build/ufp4 --version > /dev/null 2>&1; then
  echo "build/ufp4 does not start on this node (a carried .gpu-deps replaced its libraries?): make gpu again"
  UFP4_BUILT=0
fi
if [ "${UFP4_BUILT:-0}" != 1 ]; then
  make gpu > "$LOGS/build.log" 2>&1 || { tail -n 40 "$LOGS/build.log"; exit 1; }
  echo "build: $(elapsed)"
fi
# keep_results DIR: DIR lives in logs/keep/DIR behind a link, so a warm node keeps finished runs, checkpoints and
# logs between device calls. Each call's tree puts the folder sent from here back in place of the link: its files
# join the kept ones without replacing any, since a kept file is the newer (a run's log holds the lines this node
# appended to the copy sent; a results file is named by its run id). Copying them over the kept ones lost those lines.
# To replace a kept file with the one sent, remove it under logs/keep/ on the node first.
keep_results() {
  local r=$1 keep=logs/keep/$1
  mkdir -p "$keep"
  if [ -d "$r" ] && [ ! -L "$r" ]; then
    tar -C "$r" -cf - . | tar -C "$keep" --skip-old-files -xf - || { echo "keep_results: cannot keep $r" >&2; exit 1; }
    rm -rf "$r"
  fi
  [ -L "$r" ] || { mkdir -p "$(dirname "$r")"; ln -s "$PWD/$keep" "$r"; }
}
# The default corpus once on this node (data/python-8k, BPE 8192), timed; its log in $LOGS.
ensure_default_corpus() {
  [ -f data/python-8k/data.toml ] && return 0
  local s=$(date +%s)
  build/ufp4 data prepare --out data/python-8k --vocab-size 8192 > "$LOGS/data-python-8k.log" 2>&1 || { tail -n 20 "$LOGS/data-python-8k.log"; exit 1; }
  echo "data data/python-8k: $(( $(date +%s) - s )) s; data.toml SHA-256 $(sha256sum data/python-8k/data.toml | cut -c1-16)"
}
# stack_watch SECONDS FILE: in the background, SECONDS from now, the threads' stacks of every ufp4 process (gdb, else
# cuda-gdb; the main thread first) into FILE, so that a stage the call's limit ends without a word says where it was.
# Attaching stops a process's threads for seconds: the stage's timings after that are disturbed, and FILE's first line
# says when it happened. SECONDS 0 or empty: no watch. Prints the watcher's pid (none when off): `kill` it when the
# stage ends first.
stack_watch() {
  [ -n "${1:-}" ] && [ "$1" != 0 ] || return 0
  (
    sleep "$1"
    dbg=$(command -v gdb || command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
    {
      echo "stacks taken at $(date -u +%T), $1 s into the stage (its timings after this are disturbed); ptrace_scope $(cat /proc/sys/kernel/yama/ptrace_scope 2> /dev/null || echo -)"
      for p in $(pgrep -x ufp4); do
        echo "=== pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" | cut -c1-200)"
        timeout 60 "$dbg" -p "$p" -batch -ex "set pagination off" -ex "thread apply all -ascending bt 24" 2>&1 |
          grep -E "^(Thread|#)|ptrace|rror|denied|ermitted|No such" | head -n 600
      done
    } > "$2" 2>&1
  ) > /dev/null 2>&1 &
  echo $!
}
