# Install tree: headers (with the generated build_config.hpp), libweft, plugins (lib/weft/, installed by
# weft_add_transport), tools, a CMake package (find_package(weft) -> weft::weft) and a pkg-config file.
include(CMakePackageConfigHelpers)

# Users of the headers need C++20 (std::atomic_ref, designated initializers) whatever their default is.
target_compile_features(weft PUBLIC cxx_std_20)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/weft DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Generated at configure time into the build tree; platform.hpp includes it, so it must ship beside the rest.
install(FILES ${CMAKE_BINARY_DIR}/include/weft/build_config.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/weft)

install(TARGETS weft EXPORT weftTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Installed tools find the installed libweft wherever the tree is moved (the prefix is chosen at install time).
file(RELATIVE_PATH _weft_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
foreach(tool IN ITEMS weft-run weft-info weft-bench)
  if(TARGET ${tool})
    set_target_properties(${tool} PROPERTIES INSTALL_RPATH "$ORIGIN/${_weft_bin_to_lib}")
  endif()
endforeach()

install(EXPORT weftTargets NAMESPACE weft:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/weftConfig.cmake.in
  ${CMAKE_BINARY_DIR}/weftConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft
  PATH_VARS CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/weftConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/weftConfig.cmake ${CMAKE_BINARY_DIR}/weftConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)

# pkg-config: the GPU runtime's headers and library are part of the interface (gpu.hpp includes them).
set(WEFT_PC_CFLAGS "")
set(WEFT_PC_LIBS "")
set(WEFT_PC_REQUIRES "")
if(WEFT_GPU_PLATFORM STREQUAL "cuda")
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    string(APPEND WEFT_PC_CFLAGS " -I${dir}")
  endforeach()
  string(APPEND WEFT_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
elseif(WEFT_GPU_PLATFORM STREQUAL "hip")
  get_filename_component(_weft_hip_libdir ${WEFT_AMDHIP64} DIRECTORY)
  string(APPEND WEFT_PC_CFLAGS " -D__HIP_PLATFORM_AMD__=1")
  string(APPEND WEFT_PC_LIBS " -L${_weft_hip_libdir} -lamdhip64")
endif()
# The prefix is found from the .pc file's own place (pkg-config's ${pcfiledir}), so the tree can be installed
# with any `cmake --install --prefix` and moved afterwards.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(WEFT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(WEFT_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(WEFT_PC_PREFIX "\${pcfiledir}")
  string(REPLACE "/" ";" _weft_libdir_parts "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  foreach(part IN LISTS _weft_libdir_parts)
    string(APPEND WEFT_PC_PREFIX "/..")
  endforeach()
  set(WEFT_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(WEFT_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(WEFT_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/weft.pc.in ${CMAKE_BINARY_DIR}/weft.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/weft.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
