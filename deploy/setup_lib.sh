# Sourced by deploy/llamacpp/setup.sh and deploy/vllm-cpu/setup.sh (not run on its own): their
# one-line failure and their once-only marker. The caller sets WHAT, LOG, MARKER and WANT.

fail() {
    echo "$WHAT setup failed: $1 (log: $LOG)" >&2
    exit 1
}

# Print RESULT and stop when the marker names this version and RESULT is in place.
exit_if_done() {
    if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$WANT" && -x "$1" ]]; then
        echo "$1"
        exit 0
    fi
}

# Write the marker after a good run and print RESULT.
mark_done() {
    echo "$WANT" >"$MARKER"
    echo "$1"
}
