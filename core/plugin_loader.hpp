// Finding and opening plugin shared objects (core-internal): the search path, dlopen with clear errors.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace weft {

/// A dlopen()ed shared object; dlclose()d when destroyed. Not copyable.
class SharedLibrary {
 public:
  /// Opens `path` with RTLD_NOW | RTLD_LOCAL. Throws Error(kPluginError) carrying dlerror()'s text on failure.
  explicit SharedLibrary(const std::string& path);
  ~SharedLibrary();
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  /// The address of exported `name`, or nullptr when the object does not export it.
  void* symbol(const char* name) const;

  /// The path it was opened from.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* handle_ = nullptr;
};

/// One transport plugin file found on the search path.
struct TransportPluginFile {
  std::string name;  ///< <name> of libweft-transport-<name>.so
  std::string path;  ///< the file
  bool shadowed;     ///< true when a file of the same name earlier on the path wins over this one
};

/// File name of transport `name`: "libweft-transport-<name>.so".
std::string transportPluginFileName(const std::string& name);

/// The directories searched for plugins, in order, duplicates removed: `extraPath` (e.g. the config's plugins.path),
/// then WEFT_PLUGIN_PATH (colon-separated), then the build tree's plugin directory, the install directory, and
/// <directory of libweft.so>/weft. Directories need not exist.
std::vector<std::string> pluginSearchPath(const std::vector<std::string>& extraPath);

/// The first libweft-transport-<name>.so on pluginSearchPath(extraPath). Throws Error(kInvalidArgument) for a name
/// that is not [A-Za-z0-9_-]+, Error(kPluginError) listing every directory searched when there is none.
std::string findTransportPlugin(const std::string& name, const std::vector<std::string>& extraPath);

/// Every transport plugin file on pluginSearchPath(extraPath), in search order (for weft-info). Never throws for
/// unreadable or missing directories: they are skipped.
std::vector<TransportPluginFile> listTransportPlugins(const std::vector<std::string>& extraPath);

}  // namespace weft
