# Sourced by the benchmarks that signal one node of a `chorus launch`:
# launched_node_pid LAUNCH_PID NAME prints the pid of the launch's child
# whose command line sets run.node_name to NAME (nothing when none does).
launched_node_pid() {
  local child
  for child in $(pgrep -P "$1"); do
    tr '\0' ' ' < "/proc/$child/cmdline" 2>/dev/null | grep -q "node_name=\"$2\"" && echo "$child"
  done
}
