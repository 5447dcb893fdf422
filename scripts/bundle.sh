#!/usr/bin/env bash
# A build that runs on a machine without the Debian packages (a rented GPU
# host, say): the binaries, every shared library they and libfabric need
# except glibc's and the GPU stack's (the driver, cuDNN and cuBLAS, which such
# a host has and which must match its driver), the CTest files, and the
# Fashion-MNIST files, in one tarball.
#
#   scripts/bundle.sh [BUILD_DIR] [OUT.tar.xz]
#
# On the other machine, from a checkout of the same commit:
#   mkdir -p /tmp/chorus-bundle && tar -xJf OUT.tar.xz -C /tmp/chorus-bundle
#   source /tmp/chorus-bundle/env.sh   # libraries, data, build/ at its old path
#   bench/gpu_check.sh build
#
# env.sh puts the build back at the absolute path it was made at (CTest's
# files name it), links the checkout's build/ there, copies the data to the
# default folder when it is missing and adds the host's cuDNN and cuBLAS
# folders (system or pip wheels) to LD_LIBRARY_PATH.
set -euo pipefail
build=$(cd "${1:-build}" && pwd -P)
out=${2:-chorus-bundle.tar.xz}
data=/usr/share/datasets/fashion-mnist
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

binaries=(chorus)
for b in tests/chorus_cuda_tests bench/bench_train bench/chorus_bench_kernels_gpu; do
  [[ -x "$build/$b" ]] && binaries+=("$b")
done

mkdir -p "$stage/build" "$stage/lib" "$stage/data"
for b in "${binaries[@]}"; do
  mkdir -p "$stage/build/$(dirname "$b")"
  cp -p "$build/$b" "$stage/build/$b"
done
# CTest's files keep their times so that discovery is not rerun there.
(cd "$build" && find . -name CTestTestfile.cmake -o -path './tests/*_tests.cmake' -o -path './tests/*_include.cmake') |
  while read -r f; do mkdir -p "$stage/build/$(dirname "$f")"; cp -p "$build/$f" "$stage/build/$f"; done
cp -p "$data"/*.gz "$stage/data/"

libfabric=$(ldconfig -p | awk '/libfabric\.so\.1 /{print $NF; exit}')
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libcudnn|libcublas|libcuda\.)'
{ for b in "${binaries[@]}"; do ldd "$build/$b"; done; ldd "$libfabric"; echo "x => $libfabric (0)"; } |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    name=$(basename "$lib")
    [[ "$name" =~ $skip ]] || cp -L "$lib" "$stage/lib/$name"
  done

cat > "$stage/env.sh" <<EOF
# Sourced on the target machine (see scripts/bundle.sh).
bundle=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$build" && cp -a "\$bundle/build/." "$build/"
[[ -e build ]] || ln -sfn "$build" build
if [[ ! -f $data/train-images-idx3-ubyte.gz ]]; then mkdir -p $data && cp "\$bundle"/data/*.gz $data/; fi
# A library the host has under the same soname is the host's (same ABI, and
# its Python and PyTorch keep theirs): only the missing ones go on the path.
mkdir -p "\$bundle/host-has"
for f in "\$bundle"/lib/*; do
  if ldconfig -p | awk '{print \$1}' | grep -qxF "\$(basename "\$f")"; then mv "\$f" "\$bundle/host-has/"; fi
done
gpu_libs=\$(find /usr/local/cuda*/lib* /usr/lib/x86_64-linux-gnu /opt /usr/local/lib -maxdepth 7 \\
  \\( -name 'libcudnn.so.9' -o -name 'libcublasLt.so.13' \\) 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
export LD_LIBRARY_PATH="\$bundle/lib:\${gpu_libs}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF
tar -cJf "$out" -C "$stage" .
echo "bundle: $out ($(du -h "$out" | cut -f1)): ${binaries[*]}, $(ls "$stage/lib" | wc -l) libraries, the data"
