#include "plugin_loader.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <weft/error.hpp>
#include <weft/params.hpp>

#include "logging.hpp"

namespace weft {
namespace {

constexpr const char* kPrefix = "libweft-transport-";
constexpr const char* kSuffix = ".so";

bool validPluginName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

void appendColonList(const std::string& list, std::vector<std::string>& out) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
}

/// The directory holding libweft.so itself, found through an address inside it.
std::string libweftDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&libweftDirectory), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string file = info.dli_fname;
  size_t slash = file.rfind('/');
  return slash == std::string::npos ? "" : file.substr(0, slash);
}

/// Warns, once per process and directory, about a plugin directory the user named (plugins.path, WEFT_PLUGIN_PATH)
/// that is not a directory: the search would skip it silently and load a plugin from the next place on the path,
/// as a variant build named through a mistyped WEFT_PLUGIN_PATH did (docs/performance.md, eleventh session).
void warnIfNotADirectory(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(dir).second) return;
  logWarn(LogSubsys::kPlugin, "plugin directory '{}' (plugins.path / WEFT_PLUGIN_PATH) is not a directory; skipped",
          dir);
}

bool isRegularFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Under LeakSanitizer a plugin (and the vendor library it pulled in) stays mapped after dlclose, so that leaks found
// at exit have symbols to be reported (and suppressed) by.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kDlopenSanitizerFlags = RTLD_NODELETE;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kDlopenSanitizerFlags = RTLD_NODELETE;
#else
constexpr int kDlopenSanitizerFlags = 0;
#endif
#else
constexpr int kDlopenSanitizerFlags = 0;
#endif

}  // namespace

SharedLibrary::SharedLibrary(const std::string& path) : path_(path) {
  dlerror();  // clear a stale message
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | kDlopenSanitizerFlags);
  if (handle_ == nullptr) {
    const char* why = dlerror();
    throw Error(ErrorCode::kPluginError,
                "cannot load plugin " + path + ": dlopen failed: " + (why != nullptr ? why : "unknown reason"));
  }
}

SharedLibrary::~SharedLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

void* SharedLibrary::symbol(const char* name) const {
  dlerror();
  return dlsym(handle_, name);
}

std::string transportPluginFileName(const std::string& name) { return kPrefix + name + kSuffix; }

std::vector<std::string> pluginSearchPath(const std::vector<std::string>& extraPath) {
  std::vector<std::string> dirs;
  for (const auto& d : extraPath) appendColonList(d, dirs);
  if (auto env = paramString("WEFT_PLUGIN_PATH")) appendColonList(*env, dirs);
  for (const auto& d : dirs) warnIfNotADirectory(d);
  dirs.push_back(WEFT_PLUGIN_BUILD_DIR);
  dirs.push_back(WEFT_PLUGIN_INSTALL_DIR);
  std::string own = libweftDirectory();
  if (!own.empty()) dirs.push_back(own + "/weft");
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (auto& d : dirs) {
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    if (seen.insert(d).second) unique.push_back(d);
  }
  return unique;
}

std::string findTransportPlugin(const std::string& name, const std::vector<std::string>& extraPath) {
  if (!validPluginName(name)) {
    throw Error(ErrorCode::kInvalidArgument,
                "transport plugin name '" + name + "' is not 1-63 characters of letters, digits, '_' or '-'");
  }
  const std::string file = transportPluginFileName(name);
  const auto dirs = pluginSearchPath(extraPath);
  std::string searched;
  for (const auto& d : dirs) {
    std::string candidate = d + "/" + file;
    if (isRegularFile(candidate)) {
      logDebug(LogSubsys::kPlugin, "transport plugin '{}' found at {}", name, candidate);
      return candidate;
    }
    searched += (searched.empty() ? "" : ", ") + d;
  }
  throw Error(ErrorCode::kPluginError, "transport plugin '" + name + "' not found: no " + file + " in " + searched +
                                           " (set WEFT_PLUGIN_PATH or plugins.path to its directory)");
}

std::vector<TransportPluginFile> listTransportPlugins(const std::vector<std::string>& extraPath) {
  std::vector<TransportPluginFile> found;
  std::set<std::string> names;
  const std::string prefix = kPrefix, suffix = kSuffix;
  for (const auto& d : pluginSearchPath(extraPath)) {
    DIR* dir = opendir(d.c_str());
    if (dir == nullptr) continue;
    std::vector<std::string> entries;
    while (dirent* e = readdir(dir)) entries.emplace_back(e->d_name);
    closedir(dir);
    std::sort(entries.begin(), entries.end());
    for (const auto& f : entries) {
      if (f.size() <= prefix.size() + suffix.size() || f.compare(0, prefix.size(), prefix) != 0 ||
          f.compare(f.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      std::string path = d + "/" + f;
      if (!isRegularFile(path)) continue;
      std::string name = f.substr(prefix.size(), f.size() - prefix.size() - suffix.size());
      bool shadowed = !names.insert(name).second;
      found.push_back({name, path, shadowed});
    }
  }
  return found;
}

}  // namespace weft
