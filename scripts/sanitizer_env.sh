# Sourced by the scripts that run sanitized binaries (sanitize.sh, fuzz.sh,
# test.sh): the sanitizers' options, unless the caller set them.
# detect_leaks=0: libfabric's providers and OpenBLAS keep process-lifetime
# allocations that LeakSanitizer reports at exit; the checks wanted here are
# the memory errors and undefined behaviour.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
