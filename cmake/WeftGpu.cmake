# Chooses the GPU platform. Sets WEFT_GPU_PLATFORM (cuda, hip or none) and provides
# weft_gpu_sources(<target> <files...>) to compile device sources for that platform.
set(WEFT_GPU_PLATFORM none)
if(WEFT_GPU STREQUAL "auto")
  find_program(WEFT_NVCC nvcc PATHS /usr/local/cuda/bin)
  find_program(WEFT_HIPCC hipcc)
  if(WEFT_NVCC)
    set(WEFT_GPU_PLATFORM cuda)
  elseif(WEFT_HIPCC)
    set(WEFT_GPU_PLATFORM hip)
  endif()
elseif(WEFT_GPU MATCHES "^(cuda|hip|none)$")
  set(WEFT_GPU_PLATFORM ${WEFT_GPU})
else()
  message(FATAL_ERROR "WEFT_GPU must be auto, cuda, hip or none (got '${WEFT_GPU}')")
endif()

if(WEFT_GPU_PLATFORM STREQUAL "cuda")
  if(NOT WEFT_GPU_ARCHS)
    set(WEFT_GPU_ARCHS 90)
  endif()
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(WEFT_NVCC nvcc PATHS /usr/local/cuda/bin REQUIRED)
    set(CMAKE_CUDA_COMPILER ${WEFT_NVCC})
  endif()
  # nvcc drives the host compiler for .cu files; use the same one as the C++ sources so the ABI matches.
  if(NOT CMAKE_CUDA_HOST_COMPILER AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
  endif()
  # "90" -> "90-real": SASS only (-gencode=arch=compute_90,code=sm_90); an arch given as "90-virtual" or
  # "90-real" is taken as written.
  set(CMAKE_CUDA_ARCHITECTURES)
  foreach(arch IN LISTS WEFT_GPU_ARCHS)
    if(arch MATCHES "^[0-9]+[a-z]?$")
      list(APPEND CMAKE_CUDA_ARCHITECTURES ${arch}-real)
    else()
      list(APPEND CMAKE_CUDA_ARCHITECTURES ${arch})
    endif()
  endforeach()
  # One process, one runtime: executables with .cu sources link the shared cudart like libweft does.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc's C++20 flag yet (it does for nvcc >= 12 from CMake 3.26 on).
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  find_package(CUDAToolkit REQUIRED)
  set(WEFT_GPU_RUNTIME CUDA::cudart)
elseif(WEFT_GPU_PLATFORM STREQUAL "hip")
  if(NOT WEFT_GPU_ARCHS)
    set(WEFT_GPU_ARCHS "gfx90a;gfx940")
  endif()
  if(NOT CMAKE_CXX_COMPILER MATCHES "hipcc")
    message(FATAL_ERROR "WEFT_GPU=hip builds with hipcc as the C++ compiler: configure with CXX=hipcc")
  endif()
  find_library(WEFT_AMDHIP64 amdhip64 REQUIRED)
  set(WEFT_GPU_RUNTIME ${WEFT_AMDHIP64})
  set(WEFT_GPU_DEFINE __HIP_PLATFORM_AMD__=1)
  set(WEFT_HIP_OFFLOAD_FLAGS)
  foreach(arch IN LISTS WEFT_GPU_ARCHS)
    list(APPEND WEFT_HIP_OFFLOAD_FLAGS --offload-arch=${arch})
  endforeach()
  # hipcc compiles every .cc as HIP (a device pass per GPU arch) unless told otherwise; only the sources
  # given to weft_gpu_sources() are device code, so every other C++ source is compiled as plain C++.
  # The -xhip that weft_gpu_sources() adds comes later on the command line and wins for those.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-xc++>)
  # hipcc asks rocm_agent_enumerator for the local GPU whenever no --offload-arch is on its command line
  # (every plain compile and every link); on a machine without a GPU that prints a Python traceback.
  # Naming the architectures in its environment answers the question instead.
  string(REPLACE ";" "," _weft_hip_targets "${WEFT_GPU_ARCHS}")
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env HCC_AMDGPU_TARGET=${_weft_hip_targets}
      ${CMAKE_CXX_COMPILER_LAUNCHER})
  set(CMAKE_CXX_LINKER_LAUNCHER ${CMAKE_COMMAND} -E env HCC_AMDGPU_TARGET=${_weft_hip_targets}
      ${CMAKE_CXX_LINKER_LAUNCHER})
  # Debian's ROCm keeps the device bitcode libraries under the multiarch libdir; name it so that a
  # ROCM_PATH pointing elsewhere does not lose them.
  find_path(WEFT_HIP_DEVICE_LIB_PATH oclc_isa_version_90a.bc
    PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/amdgcn/bitcode /opt/rocm/amdgcn/bitcode /opt/rocm/lib/amdgcn/bitcode
    NO_DEFAULT_PATH)
  if(WEFT_HIP_DEVICE_LIB_PATH)
    list(APPEND WEFT_HIP_OFFLOAD_FLAGS --hip-device-lib-path=${WEFT_HIP_DEVICE_LIB_PATH})
  else()
    message(WARNING "weft: ROCm device libraries (rocm-device-libs, oclc_isa_version_90a.bc) not found; "
                    "hipcc falls back to its own search")
  endif()
else()
  set(WEFT_GPU_RUNTIME)
  set(WEFT_GPU_DEFINE)
endif()
message(STATUS "weft: GPU platform ${WEFT_GPU_PLATFORM} ${WEFT_GPU_ARCHS}")

# Device sources are written once (*.cu) and compiled by nvcc, hipcc, or the host compiler.
function(weft_gpu_sources target)
  target_sources(${target} PRIVATE ${ARGN})
  if(WEFT_GPU_PLATFORM STREQUAL "cuda")
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CUDA)
  elseif(WEFT_GPU_PLATFORM STREQUAL "hip")
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CXX
      COMPILE_OPTIONS "-xhip;${WEFT_HIP_OFFLOAD_FLAGS}")
  else()
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++")
  endif()
endfunction()

# The platform is baked into an installed header so that outside projects see what libweft was built for.
set(WEFT_BUILD_GPU_CUDA 0)
set(WEFT_BUILD_GPU_HIP 0)
set(WEFT_BUILD_GPU_NONE 0)
string(TOUPPER ${WEFT_GPU_PLATFORM} _weft_platform_upper)
set(WEFT_BUILD_GPU_${_weft_platform_upper} 1)
configure_file(${CMAKE_CURRENT_LIST_DIR}/build_config.hpp.in ${CMAKE_BINARY_DIR}/include/weft/build_config.hpp @ONLY)
