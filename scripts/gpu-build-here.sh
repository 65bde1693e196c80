# Sourced by the GPU scripts with `build` set to a build tree made on another machine: the tree has absolute paths
# baked in (test binaries, CTest files, the plugin directory), so link them to where the tree and the sources are
# here, and point weft at the tree's plugins; it also defines mps_start and mps_stop (the MPS daemon the ranks share).
build=$(cd "$build" && pwd)
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
bin=$(sed -n 's/^weft_BINARY_DIR:STATIC=//p' "$build/CMakeCache.txt")
if [ "$src" != "$PWD" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
if [ "$bin" != "$build" ] && [ ! -e "$bin" ]; then mkdir -p "$(dirname "$bin")" && ln -s "$build" "$bin"; fi
export WEFT_PLUGIN_PATH="$build/lib/weft"

# Several ranks share the one GPU: without MPS their kernels time-slice and cross-process spin-waits crawl.
mps_start() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo "MPS started"
}
mps_stop() { echo quit | nvidia-cuda-mps-control; }
