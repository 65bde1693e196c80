# Third-party libraries, all from the distribution's packages (README lists them).
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(LIBFABRIC IMPORTED_TARGET libfabric)
find_library(WEFT_IBVERBS_LIBRARY ibverbs)
find_path(WEFT_IBVERBS_INCLUDE infiniband/verbs.h)

# toml++ header-only: binaries built here also run on machines that have no libtomlplusplus.so (the GPU
# machines do not), and only core/config.cc parses TOML.
set_target_properties(PkgConfig::TOMLPP PROPERTIES
  INTERFACE_COMPILE_OPTIONS ""
  INTERFACE_COMPILE_DEFINITIONS "TOML_HEADER_ONLY=1"
  INTERFACE_LINK_LIBRARIES ""
  INTERFACE_LINK_OPTIONS "")
