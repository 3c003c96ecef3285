# Sourced by scripts/serve and scripts/test: one line per step on the terminal, the details in a log file.
# step "what" command...: runs the command with its output appended to $log; on failure prints its tail.
step() {
    local what=$1; shift
    printf '== %s ... ' "$what"
    if "$@" >>"$log" 2>&1; then echo ok; else
        echo "failed"; echo "$(basename "$0"): $what failed; the end of $log:" >&2; tail -n 25 "$log" >&2; exit 1
    fi
}
