#!/usr/bin/env bash
# A/B wall time of one `esnfed` command at an older commit and at the working tree, alternating.
#
#   bash benchmarks/ab_command.sh OLD_REV [RUNS] -- select --dataset wesad --algo ridge --pct all --backend sequential
#
# Needs this checkout's .venv and its data/ (e.g. `dvc repro partition` first). OLD_REV is checked
# out into a temporary worktree; each run starts in its tree's folder, so Python imports that
# tree's packages (the current folder comes first on sys.path), and reads this checkout's
# params.yaml and data/; outputs go to a temporary --runs-dir, removed before each run (or, with
# AB_RUNS_FROM=DIR, replaced by a copy of DIR before each run, untimed: the inputs of retrain or
# assess, e.g. a finished runs/ less the outputs the command writes). With AB_OWN_PARAMS=1 each side
# reads its own tree's params.yaml instead: for an OLD_REV that refuses this checkout's params.yaml
# (a key added since, e.g. study_datasets), at the price of the two sides' params differing where
# the files do.
# Prints every time and the median of each side.
set -euo pipefail
old=$1; shift
runs=5
if [ "${1:-}" != "--" ]; then runs=$1; shift; fi
[ "${1:-}" = "--" ] && shift
here=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$tmp/old" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
git -C "$here" worktree add -q --detach "$tmp/old" "$old"
py="$here/.venv/bin/python"
for _ in $(seq "$runs"); do
  for side in old new; do
    tree=$here; [ "$side" = old ] && tree=$tmp/old
    rm -rf "$tmp/runs"
    if [ -n "${AB_RUNS_FROM:-}" ]; then cp -r "$AB_RUNS_FROM" "$tmp/runs"; fi
    params=$here/params.yaml; [ -n "${AB_OWN_PARAMS:-}" ] && params=$tree/params.yaml
    start=$(date +%s.%N)
    (cd "$tree" && "$py" -c 'import sys; from esnfed_cli.main import app; sys.argv = ["esnfed"] + sys.argv[1:]; app()' \
        "$@" --runs-dir "$tmp/runs" --data-dir "$here/data" --params "$params" >/dev/null)
    echo "$side $(echo "$(date +%s.%N) - $start" | bc)"
  done
done | tee "$tmp/times"
for side in old new; do
  echo "$side median $(grep "^$side " "$tmp/times" | cut -d' ' -f2 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') s"
done
