#!/usr/bin/env bash
# Nsight Compute's per-instruction view of one kernel: the SASS with each instruction's executed count
# and warp-stall samples, as CSV, beside the kernel's summary sections. For reading where a kernel's
# instructions go (dev work; nothing here is a benchmark).
#   dev/ncu_source.sh NAME KERNEL_REGEX -- COMMAND...   writes /tmp/NAME.ncu-rep, $OUT/NAME-sass.csv, NAME-summary.txt
set -euo pipefail
name=$1 kernel=$2
shift 2
[[ ${1:-} == -- ]] && shift
out=${OUT:-.}
ncu --clock-control none --import-source no --section SourceCounters --section InstructionStats --section WarpStateStats \
    --section LaunchStats --section Occupancy --section SpeedOfLight -k "regex:$kernel" -c 1 -f -o "/tmp/$name" "$@" > "$out/$name-run.log" 2>&1 || true  # the app's own exit code is not the profile's
ncu -i "/tmp/$name.ncu-rep" --page source --csv --print-source sass > "$out/$name-sass.csv"
ncu -i "/tmp/$name.ncu-rep" --page details > "$out/$name-summary.txt"
